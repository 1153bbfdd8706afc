"""``python -m arith.train [CONFIG.yaml] [--set dotted.key=value ...] [--out DIR]``

Trains one model with a progress bar, prints the final metrics as JSON and saves a checkpoint
(``DIR/checkpoint.pt`` with ``DIR/config.yaml`` and ``DIR/summary.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from arith import config as config_lib
from arith.cli import HelpFormatter, run_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m arith.train",
        description=__doc__.split("\n")[2],
    )
    parser.add_argument("config", nargs="?", help="run config YAML (default: built-in defaults)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value by its dotted path, e.g. --set model.n_layer=4",
    )
    parser.add_argument(
        "--out", default="runs/latest", help="checkpoint folder (default runs/latest)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the checkpoint in --out"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = config_lib.load(args.config, args.overrides)
    out = Path(args.out)
    resume_from = out if args.resume and (out / "checkpoint.pt").exists() else None
    # torch's import (3-4 s on 2 cores) after the config is checked: --help and a config
    # mistake answer at once
    from arith.training.trainer import train

    bar = tqdm(total=None, disable=args.quiet, unit="step", dynamic_ncols=True, file=sys.stderr)

    shown: dict[str, str] = {}  # the bar's postfix: latest loss, and val exact match once known

    def progress(step: int, total: int, metrics: dict) -> None:
        bar.total = total
        if "train/loss" in metrics:  # none before the first step: no loss=nan
            shown["loss"] = f"{metrics['train/loss']:.3f}"
        if "val/exact_match" in metrics:
            shown["val_em"] = f"{metrics['val/exact_match']:.3f}"
        bar.set_postfix({k: shown[k] for k in ("loss", "val_em") if k in shown}, refresh=False)
        bar.update(step - bar.n)  # tqdm redraws at most every 0.1 s, whatever the step rate

    summary = train(config, checkpoint_dir=out, resume_from=resume_from, progress=progress)
    bar.close()
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    print(f"checkpoint: {out / 'checkpoint.pt'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)

"""``python -m sweeps.run SPEC.yaml [--set block.dotted.key=value ...] [--dry-run] [--out DIR]
[--tracking-uri URI] [--address ADDR] [--resume]``

Runs a sweep: validates the spec (a mistake is one line and exit 2, before anything starts),
trains every trial with Ray Tune (an embedded local Ray unless ``--address``), records it in
MLflow from the driver, then writes the scaling table and plots from MLflow into DIR/<name>/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arith.errors import ConfigError
from sweeps.cli import ArgumentParser
from sweeps.runtime.driver import run_sweep
from sweeps.runtime.dry_run import dry_run_text
from sweeps.spec.sweep_spec import load_spec


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(prog="python -m sweeps.run", description=__doc__.split("\n\n")[1])
    parser.add_argument("spec", help="search-space YAML (see search_spaces/)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override the spec: base.train.max_steps=50, space.model.d_model=[64,128]",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the trials; start nothing")
    parser.add_argument("--out", default="results", help="output folder (default results/)")
    parser.add_argument(
        "--tracking-uri", help="MLflow URI (default $MLFLOW_TRACKING_URI or ./mlflow.db)"
    )
    parser.add_argument(
        "--address",
        help="an existing Ray cluster: auto, HOST:PORT or ray://HOST:10001 (default: start one)",
    )
    parser.add_argument(
        "--storage",
        help="Tune's storage path for checkpoints, reachable from every node: a shared path or "
        "a URI (s3://..., gs://...) (default DIR/<name>/ray)",
    )
    parser.add_argument(
        "--storage-shared",
        action="store_true",
        help="the storage path is a filesystem mounted at the same path on every node",
    )
    parser.add_argument("--resume", action="store_true", help="continue the sweep in --out")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start over where an earlier run of this sweep lies: delete its output folder and "
        "checkpoints first (its MLflow runs stay, as an older parent run)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        spec = load_spec(args.spec, args.overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.resume and args.overwrite:
        print("error: --resume and --overwrite: choose one", file=sys.stderr)
        return 2
    if args.dry_run:
        print(dry_run_text(spec))
        return 0
    from sweeps.analysis.store import default_tracking_uri

    uri = args.tracking_uri or default_tracking_uri()
    out_dir = Path(args.out).resolve() / spec.name
    return run_sweep(
        spec,
        out_dir,
        uri,
        address=args.address,
        resume=args.resume,
        overwrite=args.overwrite,
        storage=args.storage,
        storage_shared=args.storage_shared,
    )


if __name__ == "__main__":
    from arith.cli import run_main

    run_main(main)

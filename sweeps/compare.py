"""Compare two or more finished sweeps on the keys they share, cell by cell.

    python -m sweeps.compare results/smoke results/smoke_long
    python -m sweeps.compare smoke run:27d07341... --tracking-uri sqlite:///mlflow.db
    python -m sweeps.compare results/a results/b results/c --metric val/loss --keys model.d_model

Each SWEEP is an output folder of ``python -m sweeps.run`` (with its trials.csv), an MLflow
experiment name (its newest sweep) or ``run:<parent run id>``. Prints the compared metric per
shared cell for every sweep, with each sweep's difference from the first, and writes
compare.md, compare.csv and compare.png to --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlflow.exceptions import MlflowException

from arith.cli import one_line
from sweeps.analysis import comparison
from sweeps.analysis.collect import CollectError
from sweeps.analysis.comparison import Comparison
from sweeps.analysis.store import write_atomic, write_figure
from sweeps.api import compare_loaded
from sweeps.cli import ArgumentParser

DEFAULT_OUT = "results/compare"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(prog="python -m sweeps.compare", description=__doc__.split("\n")[0])
    parser.add_argument("sweeps", nargs="+", metavar="SWEEP", help="a folder, name or run:<id>")
    parser.add_argument("--tracking-uri", default=None, help="MLflow URI for names and run:<id>")
    parser.add_argument(
        "--metric", default=None, help="the metric compared (default test/exact_match, else val/)"
    )
    parser.add_argument(
        "--keys", default=None, help="comma-separated keys of the cells (default: the shared ones)"
    )
    parser.add_argument(
        "--select-by",
        default=None,
        help="validation metric that picks a sweep's unshared axes per cell "
        "(default: its select.by, else its sweep.metric)",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder ({DEFAULT_OUT}/)")
    return parser.parse_args(argv)


def write_comparison(result: Comparison, out_dir: str | Path) -> list[Path]:
    """compare.md, compare.csv (the comparison frame) and compare.png in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.md", out / "compare.csv", out / "compare.png"]
    write_atomic(paths[0], comparison.to_markdown(result))
    write_atomic(paths[1], result.frame.to_csv())
    write_figure(paths[2], comparison.figure(result), dpi=120)
    return paths


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
    try:
        result = compare_loaded(
            args.sweeps, args.tracking_uri, metric=args.metric, keys=keys, select_by=args.select_by
        )
        paths = write_comparison(result, args.out)
    except (CollectError, ValueError, MlflowException, OSError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    print(paths[0].read_text(encoding="utf-8"), end="")
    print(f"wrote {', '.join(p.name for p in paths)} to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

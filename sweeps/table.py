"""Rebuild a sweep's tables and plots from MLflow alone, and print the markdown tables.

    python -m sweeps.table width_vs_depth           # an experiment -> results/width_vs_depth/
    python -m sweeps.table results/width_vs_depth   # an output folder, rebuilt in place
    python -m sweeps.table width_vs_depth --tracking-uri sqlite:///mlflow.db --out /tmp/tables

A folder's sweep.json names its parent run and store (flags override them); an experiment name
means its newest parent run. Table specs come from the folder's spec.yaml copy when given a
folder that has one, else from the parent run's spec.yaml artifact, else the defaults (the
metric by every axis the sweep varied).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlflow.exceptions import MlflowException

from arith.cli import HelpFormatter, one_line
from sweeps.analysis.collect import (
    CollectError,
    child_runs,
    find_parent_run,
    open_client,
    spec_from_parent,
    swept_paths,
    trials_frame,
    with_curves,
    write_outputs,
)
from sweeps.analysis.plots import CURVE_METRICS
from sweeps.analysis.sources import is_folder, read_spec_file, table_specs_of
from sweeps.analysis.store import default_tracking_uri, read_state
from sweeps.analysis.tables import default_table_specs

DEFAULT_OUT = "results"


def resolve_tracking_uri(flag: str | None) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db."""
    return flag or default_tracking_uri()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m sweeps.table",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("sweep", metavar="SWEEP_NAME_OR_DIR", help="experiment name or DIR/<name>")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI")
    parser.add_argument(
        "--out", default=None, help=f"output root; writes OUT/<name> ({DEFAULT_OUT})"
    )
    parser.add_argument("--parent-run-id", default=None, help="a sweep other than the newest")
    return parser.parse_args(argv)


def _target(sweep: str, out: str | None) -> tuple[str, Path, Path | None]:
    """(experiment name, output folder, folder holding a spec.yaml copy or None)."""
    path = Path(sweep)
    if is_folder(sweep):
        name = path.resolve().name
        out_dir = Path(out) / name if out else path
        return name, out_dir, path if (path / "spec.yaml").is_file() else None
    return sweep, Path(out or DEFAULT_OUT) / sweep, None


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        name, out_dir, spec_dir = _target(args.sweep, args.out)
        # A sweep's folder names its own parent run and store (sweep.json): another sweep of
        # the same name, newer in that experiment, is not this folder's.
        saved = read_state(Path(args.sweep)) if is_folder(args.sweep) else {}
        uri = resolve_tracking_uri(args.tracking_uri or saved.get("tracking_uri"))
        client = open_client(uri)
        parent = find_parent_run(client, name, args.parent_run_id or saved.get("parent_run_id"))
        if spec_dir is not None:
            spec = read_spec_file(spec_dir / "spec.yaml")
        else:
            spec = spec_from_parent(client, parent)
        specs, metric = table_specs_of(spec)
        runs = child_runs(client, parent)
        trials = trials_frame(runs)
        specs = specs or default_table_specs(trials, metric)
        wanted = [*CURVE_METRICS, *(v for s in specs for v in s.values)]
        trials, curves = with_curves(client, runs, trials, wanted)
        paths = write_outputs(trials, curves, specs, out_dir, metric=metric, axes=swept_paths(spec))
    except (CollectError, ValueError, MlflowException, OSError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    print((out_dir / "table.md").read_text(encoding="utf-8"), end="")
    print(f"wrote {len(paths)} files to {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

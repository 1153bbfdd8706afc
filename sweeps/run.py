"""``python -m sweeps.run SPEC.yaml [--set block.dotted.key=value ...] [--dry-run] [--out DIR]
[--tracking-uri URI] [--address ADDR] [--resume | --overwrite | --extend [--reuse-stale]]
[--register NAME]``

Runs a sweep: validates the spec (a mistake is one line and exit 2, before anything starts),
trains every trial with Ray Tune (an embedded local Ray unless ``--address``), records it in
MLflow from the driver, then writes the scaling table and plots from MLflow into DIR/<name>/;
with ``--register NAME``, the best trial's model becomes a version of NAME in MLflow's Model
Registry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arith.errors import ConfigError
from sweeps.cli import ArgumentParser


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
    parser.add_argument(
        "--extend",
        action="store_true",
        help="a sweep that already ran in --out, with a changed spec: train only the trials "
        "it has not finished before, reuse the rest (same parent run)",
    )
    parser.add_argument(
        "--reuse-stale",
        action="store_true",
        help="with --extend: reuse finished trials trained by other arith code too",
    )
    parser.add_argument(
        "--register",
        metavar="NAME",
        help="once the sweep has ended, register the best trial's model as a new version of "
        "NAME in MLflow's Model Registry (models:/NAME/<version>)",
    )
    return parser.parse_args(argv)


def mode_error(args: argparse.Namespace) -> str | None:
    """The one line for flags that do not go together, or None."""
    chosen = [f"--{f}" for f in ("resume", "overwrite", "extend") if getattr(args, f)]
    if len(chosen) > 1:
        return f"{' and '.join(chosen)}: choose one"
    if args.reuse_stale and not args.extend:
        return "--reuse-stale: only with --extend"
    if args.register is not None:
        from sweeps.tracking.registry import name_error

        return name_error(args.register)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Imported here, inside run_main: a Ctrl-C during these imports is one line. The spec is
    # read and checked without torch, Ray or MLflow, so that a mistake in it is one line in about
    # a second; the driver's imports (seconds) come after.
    from sweeps.spec.sweep_spec import load_spec

    try:
        spec = load_spec(args.spec, args.overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if (mistake := mode_error(args)) is not None:
        print(f"error: {mistake}", file=sys.stderr)
        return 2
    from sweeps.analysis.store import default_tracking_uri

    uri = args.tracking_uri or default_tracking_uri()
    out_dir = Path(args.out).resolve() / spec.name
    if args.dry_run:
        return _dry_run(spec, args, out_dir, uri)
    from sweeps.runtime.driver import run_sweep

    return run_sweep(
        spec,
        out_dir,
        uri,
        address=args.address,
        resume=args.resume,
        overwrite=args.overwrite,
        extend=args.extend,
        reuse_stale=args.reuse_stale,
        storage=args.storage,
        storage_shared=args.storage_shared,
        register=args.register,
    )


def _dry_run(spec, args: argparse.Namespace, out_dir: Path, uri: str) -> int:
    """The trials; with --extend, which it reuses and which it trains (read from MLflow)."""
    from sweeps.runtime.dry_run import dry_run_text

    text = dry_run_text(spec, out_dir, uri, args.address)
    if args.extend:
        from sweeps.runtime.extend import preview
        from sweeps.runtime.state import SweepError

        try:
            text += "\n" + preview(spec, out_dir, uri, args.storage, reuse_stale=args.reuse_stale)
        except SweepError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    print(text)
    return 0


if __name__ == "__main__":
    from arith.cli import run_main

    run_main(main)

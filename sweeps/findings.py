"""The findings report: each shipped search space's table, a plot, its measured time and the
command that made it, next to what its seed document claims.

    python -m sweeps.findings --run                    # run all eight spaces, then write the report
    python -m sweeps.findings                          # the report from MLflow, for spaces that ran
    python -m sweeps.findings grokking --run --set sweep.resources.gpu=0.25   # one space again, GPU

Every figure in ``docs/findings.md`` comes from a run: tables and checks from the trials in
MLflow, times from the wall clock of ``sweeps.run`` (recorded beside its outputs in
``findings_run.json``), so on a GPU cluster the same command refreshes it at paper size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arith.cli import HelpFormatter
from sweeps.analysis.claims import CLAIMS
from sweeps.analysis.collect import CollectError
from sweeps.analysis.findings_report import (
    collect_sweep,
    generic_claim,
    has_run,
    kept_section,
    not_run_section,
    previous_sections,
    run_space,
    section,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m sweeps.findings",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument(
        "spaces",
        nargs="*",
        help=f"spaces to run with --run (default: {', '.join(CLAIMS)}); the report covers "
        "them and every other shipped space that has run",
    )
    parser.add_argument("--run", action="store_true", help="run the spaces first (sweeps.run)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to every sweeps.run (e.g. base.train.max_steps=20000)",
    )
    parser.add_argument("--spaces-dir", default="search_spaces", help="where SPACE.yaml lives")
    parser.add_argument("--results", default="results", help="sweeps.run --out (results/)")
    parser.add_argument("--tracking-uri", default=None, help="MLflow store (./mlflow.db)")
    parser.add_argument("--out", default="docs", help="writes OUT/findings.md and OUT/findings/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from sweeps.analysis.store import default_tracking_uri

    uri = args.tracking_uri or default_tracking_uri()
    results, out = Path(args.results).resolve(), Path(args.out)
    # The report always covers every shipped space, so running one space refreshes its
    # section without dropping the others' (they come back from MLflow).
    to_run = set(args.spaces or CLAIMS)
    spaces = [*CLAIMS, *(s for s in args.spaces if s not in CLAIMS)]
    plots_dir = out / "findings"
    earlier = previous_sections(out / "findings.md")
    sections = []
    # Every space's file first: a misspelt name is refused before any space runs or is read.
    missing = [s for s in spaces if not (Path(args.spaces_dir) / f"{s}.yaml").is_file()]
    if missing:
        print(
            f"error: space {missing[0]!r}: no file {args.spaces_dir}/{missing[0]}.yaml",
            file=sys.stderr,
        )
        return 2
    try:
        for space in spaces:
            claim = CLAIMS.get(space) or generic_claim(space)
            spec = Path(args.spaces_dir) / f"{space}.yaml"
            sweeps = {"main": (space, ())}
            sweeps |= {name: (name, sets) for name, sets in claim.companions.items()}
            if args.run and space in to_run:
                for sweep, sets in sweeps.values():
                    run_space(spec, sweep, [*args.overrides, *sets], results, uri)
            frames, parts = {}, []
            if not has_run(sweeps["main"][0], results, uri):
                kept = earlier.get(space)
                sections.append(kept_section(space, kept) if kept else not_run_section(claim))
                continue
            for key, (sweep, _) in sweeps.items():
                trials, tables, record, figure = collect_sweep(sweep, results, uri, claim.plot)
                frames[key] = trials
                parts.append((sweep, tables, record, figure))
            _, tables, record, figure = parts[0]
            plot = None
            if figure is not None:
                plots_dir.mkdir(parents=True, exist_ok=True)
                figure.savefig(plots_dir / f"{space}.png", dpi=110)
                plot = f"findings/{space}.png"
            for sweep, more_tables, more_record, _ in parts[1:]:
                tables += (
                    f"\n\n{sweep} (`{more_record['command']}`, {more_record['wall_s']:.0f} s):"
                )
                tables += "\n\n" + more_tables
            sections.append(section(claim, frames, tables, record, plot))
    except CollectError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    header = (
        "# Findings\n\nEach shipped search space at its default size, next to what its seed "
        "document claims. Generated by `python -m sweeps.findings` from the runs' MLflow "
        "records; no figure here is typed by hand. Every best cell, shape or arm is chosen on "
        "validation (val/exact_match, the mean over seeds per cell; longer_val/ for operand "
        "length) and reported on held-out sets (test/, longer/); a bar whose data is absent "
        "reads not measured.\n\n"
    )
    (out / "findings.md").write_text(header + "\n".join(sections), encoding="utf-8")
    print(f"wrote {out / 'findings.md'} ({len(sections)} spaces)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The findings report's parts, the body of ``python -m sweeps.findings``: running a shipped
space (``sweeps.run`` as a subprocess, timed), reading its sweep back from MLflow, and each
space's section of ``docs/findings.md`` beside the claim of its seed document."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from sweeps.analysis.claims import Claim
from sweeps.analysis.collect import (
    CollectError,
    find_parent_run,
    newest_parent,
    open_client,
    render_tables,
    spec_from_parent,
    trials_from_mlflow,
)
from sweeps.analysis.plots import plots_for
from sweeps.analysis.store import STATE_FILE, write_atomic
from sweeps.analysis.tables import default_table_specs
from sweeps.spec.table_block import table_specs_from_block

RUN_RECORD = "findings_run.json"
# The one plot a space's section shows: the first of these the sweep has.
PLOT_PREFERENCE = ("width_x_depth", "batch_size_x_lr", "exact_match_vs_params", "training_curves")


def machine() -> str:
    """The hardware a time was measured on, in words."""
    cores = os.cpu_count() or 0
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # a report must not fail on a driver problem
        gpu = None
    return f"{cores} CPU cores" + (f", {gpu}" if gpu else ", no GPU")


def run_space(spec: Path, sweep: str, overrides: list[str], results: Path, uri: str) -> dict:
    """Run one sweep with ``sweeps.run`` and record its command and wall time."""
    args = ["-m", "sweeps.run", str(spec), *(a for o in overrides for a in ("--set", o))]
    args += ["--overwrite"]  # --run measures the space afresh, replacing an earlier run's outputs
    args += ["--out", str(results), "--tracking-uri", uri]
    shown = shlex.join(["python", "-m", "sweeps.run", str(spec), *args[3:-4]])
    print(f"findings: running {shown}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    code = subprocess.call([sys.executable, *args])
    record = {
        "command": shown,
        "wall_s": round(time.perf_counter() - start, 1),
        "exit_code": code,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    folder = results / sweep
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / RUN_RECORD, json.dumps(record, indent=1) + "\n")
    if code != 0:
        raise CollectError(f"{shown} exited with {code}")
    return record


def _parent_id(results: Path, sweep: str) -> str | None:
    """The parent run ``sweeps.run --out RESULTS`` recorded for ``sweep``; None without a state
    file (the sweep did not run into this results folder)."""
    state = results / sweep / STATE_FILE
    if not state.is_file():
        return None
    try:
        parent_id = json.loads(state.read_text(encoding="utf-8")).get("parent_run_id")
    except (ValueError, AttributeError):
        parent_id = None
    if not parent_id:
        raise CollectError(f"{state}: names no parent_run_id (not a sweeps.run state file)")
    return parent_id


def _parent_run(client, sweep: str, results: Path):
    """The parent run this results folder's state file names: never the newest parent of the
    experiment instead, which may be another sweep's run of the same name."""
    parent_id = _parent_id(results, sweep)
    if parent_id is None:
        raise CollectError(
            f"sweep {sweep!r}: no {results / sweep / STATE_FILE}, so which parent run in MLflow "
            "is this report's is unknown (pass the --results folder it ran into, or --run it)"
        )
    try:
        return find_parent_run(client, sweep, parent_id)
    except CollectError as err:
        raise CollectError(f"{results / sweep / STATE_FILE} names {err}") from None


def collect_sweep(
    sweep: str, results: Path, uri: str, plot: str | None = None
) -> tuple[pd.DataFrame, str, dict, object]:
    """(trials, tables markdown, run record, the section's figure or None) of one sweep."""
    client = open_client(uri)
    parent = _parent_run(client, sweep, results)
    spec = spec_from_parent(client, parent) or {}
    trials, curves = trials_from_mlflow(uri, sweep, parent.info.run_id)
    # A trial still RUNNING or PENDING was cut off (the sweep was interrupted): its numbers
    # are not a result, so the checks and tables leave it out and the section says so.
    unfinished = trials["status"].isin(["RUNNING", "PENDING"]) if "status" in trials else None
    left_out = 0 if unfinished is None else int(unfinished.sum())
    if left_out:
        trials = trials[~unfinished]
        curves = curves[curves["trial_id"].isin(trials["trial_id"])] if len(curves) else curves
    metric = (spec.get("sweep") or {}).get("metric")
    specs = table_specs_from_block(spec.get("table")) or default_table_specs(trials, metric)
    record_path = results / sweep / RUN_RECORD
    if record_path.is_file():
        record = json.loads(record_path.read_text(encoding="utf-8"))
    else:  # ran without this command: the parent run's own start and end
        end = parent.info.end_time or parent.info.start_time
        record = {
            "command": f"python -m sweeps.run (parent run {parent.info.run_id})",
            "wall_s": round((end - parent.info.start_time) / 1000, 1),
            "machine": "a machine not recorded (times from the MLflow parent run)",
        }
    record = {**record, "unfinished": left_out}
    figures = plots_for(trials, curves, metric) if not trials.empty else {}
    preference = ((plot,) if plot else ()) + PLOT_PREFERENCE
    figure = next((figures[k] for k in preference if k in figures), None)
    return trials, render_tables(trials, specs), record, figure


def section(claim: Claim, frames: dict, tables: str, record: dict, plot: str | None) -> str:
    minutes = record["wall_s"] / 60
    shows = claim.check(frames)
    lines = [
        f"## {claim.space}",
        "",
        f"**Seed {claim.seed}, claimed:** {claim.claim}",
        "",
        *(["**What this run shows:**", "", *(f"- {s}" for s in shows), ""] if shows else []),
        f"Measured: {record['wall_s']:.0f} s ({minutes:.1f} min) on {record['machine']}"
        + (f", {record['date']}" if "date" in record else "")
        + (
            f"; the 15-minute CPU budget: {'**met**' if minutes <= 15 else '**not met**'}"
            if "no GPU" in record["machine"]
            else ""
        )
        + ".  ",
        f"Command: `{record['command']}`",
        "",
        *(
            [
                f"_{record['unfinished']} trial(s) did not finish (the sweep was interrupted; "
                "`sweeps.run ... --resume` continues it) and are left out below._",
                "",
            ]
            if record.get("unfinished")
            else []
        ),
        tables.replace("\n## ", "\n### ").replace("## ", "### ", 1).rstrip(),
        "",
    ]
    if plot:
        lines += [f"![{claim.space}]({plot})", ""]
    return "\n".join(lines)


def has_run(sweep: str, results: Path, uri: str) -> bool:
    """Whether the sweep ran into ``results`` (its state file is there); with no state file but
    parent runs of that name in MLflow, CollectError says so rather than guessing one."""
    if (results / sweep / STATE_FILE).is_file():
        return True
    try:
        client = open_client(uri)
    except CollectError:  # no store yet: nothing has run
        return False
    experiment = client.get_experiment_by_name(sweep)
    if experiment is None or newest_parent(client, experiment.experiment_id) is None:
        return False
    _parent_run(client, sweep, results)  # raises: parents in MLflow, none named here
    return True


def not_run_section(claim: Claim) -> str:
    return (
        f"## {claim.space}\n\n**Seed {claim.seed}, claimed:** {claim.claim}\n\n"
        f"_Not run yet: `python -m sweeps.findings {claim.space} --run`._\n"
    )


KEPT_NOTE = (
    "_Kept from the previous report: this space has no run in this MLflow store, so its section "
    "(figures, time and command) is the earlier run's, unchanged; "
    "`python -m sweeps.findings {space} --run` measures it again._"
)


def previous_sections(report: Path) -> dict[str, str]:
    """The sections of an earlier report by space, so that refreshing some spaces keeps the
    others measured before (a store need not hold every space's run)."""
    if not report.is_file():
        return {}
    sections = {}
    for part in report.read_text(encoding="utf-8").split("\n## ")[1:]:
        space, _, body = part.partition("\n")
        if "_Not run yet:" not in body:
            sections[space.strip()] = f"## {space.strip()}\n{body.rstrip()}\n"
    return sections


def kept_section(space: str, text: str) -> str:
    """An earlier section marked as kept (once, however often it is kept again)."""
    note = KEPT_NOTE.format(space=space)
    if note in text:
        return text
    heading, _, body = text.partition("\n")
    return f"{heading}\n\n{note}\n{body}"


def generic_claim(space: str) -> Claim:
    return Claim(space, "-", "no seed claim is registered for this space.", lambda frames: [])

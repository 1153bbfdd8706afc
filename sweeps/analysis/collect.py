"""MLflow -> trials and curves DataFrames -> tables.md, table.csv, trials.csv and plots.

Reads only MLflow (the layout sweeps/tracking/records.py and writer.py write): the sweep's
parent run (tag ``sweep.role=parent``) and its nested child runs, one per trial (tag
``mlflow.parentRunId``). Params come back as strings; they are turned back into numbers column
by column, so a column of ``"64"``/``"128"`` is an int column and ``"None"`` becomes a missing
value; a trial's single values measured at its end come back from its tags
(``sweeps.analysis.run_values``).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pandas as pd
import yaml
from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from sweeps.analysis.convergence import CONVERGENCE_TAG, budget_key, convergence_column
from sweeps.analysis.phases import PHASE_METRICS, with_phase
from sweeps.analysis.plots import CURVE_METRICS, write_plots
from sweeps.analysis.run_values import is_number_or_none, parse_param_column, run_figures
from sweeps.analysis.store import LEFT_OUT_TAG, is_sqlite, sqlite_file, write_atomic
from sweeps.analysis.table_fits import GroupFit, fit_note, table_fits, with_fit_columns
from sweeps.analysis.table_notes import describe, pooled_axes, status_note
from sweeps.analysis.tables import (
    build_table,
    default_table_specs,
    summarise,
    to_markdown,
)
from sweeps.spec.identity import CODE_TAG, code_note, hardware_note
from sweeps.spec.table_block import TableSpec

FRONT_COLUMNS = ("trial_id", "status", "stopped_reason", "run_id")
SIZE_COLUMNS = ("n_params", "n_params_non_embedding", "flops_per_token")
TAIL_COLUMNS = ("steps", "wall_time_s")
CURVE_COLUMNS = ("trial_id", "metric", "step", "value")


class CollectError(Exception):
    """A user-facing problem (missing store, unknown experiment): str(err) is one line."""


def open_client(tracking_uri: str) -> MlflowClient:
    """A client for an existing store; never creates an empty one where a path was mistyped."""
    path = _local_store_path(tracking_uri)
    if path is not None and not path.exists():
        raise CollectError(f"no MLflow store at {path} (tracking URI {tracking_uri})")
    return MlflowClient(tracking_uri)


def _local_store_path(uri: str) -> Path | None:
    if is_sqlite(uri):
        return sqlite_file(uri)
    if uri.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", uri))
    return Path(uri) if "://" not in uri else None


def find_parent_run(
    client: MlflowClient, experiment_name: str, parent_run_id: str | None = None
) -> Run:
    """The sweep's parent run: the given one, else the newest with tag sweep.role=parent."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None or experiment.lifecycle_stage != "active":
        raise CollectError(f"no MLflow experiment named {experiment_name!r}")
    if parent_run_id is not None:
        try:
            run = client.get_run(parent_run_id)
        except MlflowException:
            raise CollectError(f"no MLflow run with id {parent_run_id!r}") from None
        if run.info.experiment_id != experiment.experiment_id:
            raise CollectError(f"run {parent_run_id!r} is not in experiment {experiment_name!r}")
        return run
    run = newest_parent(client, experiment.experiment_id)
    if run is None:
        raise CollectError(f"experiment {experiment_name!r} has no sweep parent run")
    return run


def newest_parent(client: MlflowClient, experiment_id: str, unfinished: bool = False) -> Run | None:
    """The most recently started sweep parent run of an experiment (``unfinished``: of those
    not FINISHED, which a resumed sweep continues), or None."""
    query = "tags.`sweep.role` = 'parent'"
    if unfinished:
        query += " and attributes.status != 'FINISHED'"
    runs = client.search_runs(
        [experiment_id], filter_string=query, order_by=["attributes.start_time DESC"], max_results=1
    )
    return runs[0] if runs else None


def child_runs(client: MlflowClient, parent: Run, *, left_out: bool = False) -> list[Run]:
    """Every trial run under ``parent``; of two runs with one trial_id, the newer wins. Runs
    an ``--extend`` left out of the sweep (``LEFT_OUT_TAG``) only with ``left_out``."""
    filter_string = f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs(
            [parent.info.experiment_id], filter_string=filter_string, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            break
    if not left_out:
        runs = [r for r in runs if LEFT_OUT_TAG not in r.data.tags]
    newest: dict[str, Run] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        newest[_trial_id(run)] = run
    return list(newest.values())


def _trial_id(run: Run) -> str:
    return run.data.tags.get("sweep.trial_id") or run.info.run_name or run.info.run_id


def trials_frame(runs: Iterable[Run]) -> pd.DataFrame:
    """One row per trial run: bookkeeping tags, every param, every figure (``run_figures``: the
    latest value of every metric and the single values a run keeps as tags)."""
    runs = sorted(runs, key=_trial_id)
    params = sorted({k for r in runs for k in r.data.params})
    figures = [run_figures(r) for r in runs]
    metrics = sorted({k for found in figures for k in found})
    columns: dict[str, list[object]] = {
        "trial_id": [_trial_id(r) for r in runs],
        "status": [r.data.tags.get("sweep.status") for r in runs],
        "stopped_reason": [r.data.tags.get("sweep.stopped_reason") for r in runs],
        "run_id": [r.info.run_id for r in runs],
    }
    if any(CODE_TAG in r.data.tags for r in runs):  # the arith code that trained each trial
        columns["code"] = [r.data.tags.get(CODE_TAG) for r in runs]
    if any(CONVERGENCE_TAG in r.data.tags for r in runs):  # set by the tracker as a trial ends
        columns["convergence"] = [r.data.tags.get(CONVERGENCE_TAG) for r in runs]
    for key in params:
        values = parse_param_column([r.data.params.get(key) for r in runs])
        columns[key] = values
    order = [
        *[m for m in SIZE_COLUMNS if m in metrics],
        *[m for m in metrics if m not in SIZE_COLUMNS and m not in TAIL_COLUMNS],
        *[m for m in TAIL_COLUMNS if m in metrics],
    ]
    for key in order:
        columns[key] = [found.get(key, float("nan")) for found in figures]
    frame = pd.DataFrame(columns)
    if "convergence" in frame.columns:  # next to the status it qualifies
        frame.insert(3, "convergence", frame.pop("convergence"))
    # MLflow stores every metric as a float; counts read better as the integers they are.
    for key in ("n_params", "n_params_non_embedding", "steps"):
        if key in frame.columns and len(frame) and (frame[key] % 1 == 0).all():
            frame[key] = frame[key].astype("int64")
    # A column of ints with a None in it becomes float (NaN); without one it stays int64.
    for key in params:
        if frame[key].dtype == object and frame[key].map(is_number_or_none).all():
            frame[key] = pd.to_numeric(frame[key])
    return frame.reset_index(drop=True)


def curves_frame(client: MlflowClient, runs: Iterable[Run], metrics: Iterable[str]) -> pd.DataFrame:
    """Long format (trial_id, metric, step, value) from each run's metric history."""
    records = []
    for run in runs:
        for metric in dict.fromkeys(metrics):
            if metric not in run.data.metrics:
                continue
            history = client.get_metric_history(run.info.run_id, metric)
            for point in sorted(history, key=lambda m: (m.step, m.timestamp)):
                records.append((_trial_id(run), metric, int(point.step), float(point.value)))
    curves = pd.DataFrame.from_records(records, columns=list(CURVE_COLUMNS))
    # One value per (trial, metric, step): the last logged wins, should a retry log one twice.
    curves = curves.drop_duplicates(["trial_id", "metric", "step"], keep="last")
    return curves.sort_values(["trial_id", "metric", "step"]).reset_index(drop=True)


def trials_from_mlflow(
    tracking_uri: str,
    experiment_name: str,
    parent_run_id: str | None = None,
    *,
    curve_metrics: Iterable[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(trials, curves) of the newest sweep in ``experiment_name`` (or of ``parent_run_id``)."""
    client = open_client(tracking_uri)
    runs = child_runs(client, find_parent_run(client, experiment_name, parent_run_id))
    metrics = list(curve_metrics) if curve_metrics is not None else list(CURVE_METRICS)
    return with_curves(client, runs, trials_frame(runs), metrics)


def with_curves(
    client: MlflowClient, runs: list[Run], trials: pd.DataFrame, metrics: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(trials with their learning phase, the ``metrics`` curves of ``runs``): the curves the
    phase reads are fetched too and left out again (the caller need not have asked for them)."""
    curves = curves_frame(client, runs, [*metrics, *PHASE_METRICS])
    trials = with_phase(trials, curves)
    return trials, curves[curves["metric"].isin(metrics)].reset_index(drop=True)


def spec_from_parent(client: MlflowClient, parent: Run) -> dict | None:
    """The parent's ``spec.yaml`` artifact, parsed; None when it has none."""
    names = {f.path for f in client.list_artifacts(parent.info.run_id)}
    if "spec.yaml" not in names:
        return None
    with tempfile.TemporaryDirectory() as tmp, no_progress_bar():
        local = client.download_artifacts(parent.info.run_id, "spec.yaml", dst_path=tmp)
        text = Path(local).read_text(encoding="utf-8")
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise CollectError(f"spec.yaml of run {parent.info.run_id}: not YAML ({err})") from None
    return spec if isinstance(spec, dict) else None


@contextlib.contextmanager
def no_progress_bar() -> Iterator[None]:
    # MLflow draws a tqdm bar on stderr for every download; a command's stderr is for errors.
    name = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    before = os.environ.get(name)
    os.environ[name] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def render_tables(
    trials: pd.DataFrame,
    specs: Sequence[TableSpec],
    fits: Mapping[str, list[GroupFit] | str] | None = None,
) -> str:
    """Every table under its own heading, as written to table.md (``fits``: ``table_fits``'s,
    computed when not given)."""
    fits = table_fits(trials, specs) if fits is None else fits
    sections = []
    for spec in specs:
        if trials.empty:
            body = "_no trials_"
        else:
            try:
                body = to_markdown(build_table(trials, spec), spec, budget_key(trials))
            except ValueError as err:
                # One table the trials cannot fill should not lose the others (or the sweep).
                body = f"_table not built: {err}_"
            if spec.fit is not None:
                body += "\n\n" + fit_note(fits[spec.name], spec)
            note = status_note(trials, spec)
            if note:  # diverged or errored trials are in the cells; say which they are
                body += "\n\n" + "  \n".join(f"_{line}_" for line in note.splitlines())
        caption = describe(spec, _pooled(trials, spec)) + code_note(trials)
        caption += hardware_note(trials)
        sections.append(f"## {spec.name}\n\n{caption}\n\n{body}\n")
    return "\n".join(sections)


def _pooled(trials: pd.DataFrame, spec: TableSpec) -> list[str]:
    """The axes a table's cells pool; none when the trials cannot fill the table."""
    try:
        return pooled_axes(trials, spec)
    except ValueError:  # a missing column: the table says so itself
        return []


def write_outputs(
    trials: pd.DataFrame,
    curves: pd.DataFrame,
    specs: Sequence[TableSpec],
    out_dir: str | Path,
    *,
    metric: str | None = None,
    axes: Sequence[str] = (),
    note: str | None = None,
) -> list[Path]:
    """Write trials.csv, table.md (``note`` its first paragraph), table.csv (+
    table_<name>.csv when several) and the plots, each file in one rename: a stop or a kill
    while they are written leaves each whole, the old one or the new, never a table without
    its note. ``axes``: the swept config paths, which trials.csv lists right after trial id
    and status."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = list(specs) or default_table_specs(trials, metric)
    trials = with_convergence(trials, curves, metric)
    fits = table_fits(trials, specs) if not trials.empty else {}
    paths = [out / "trials.csv", out / "table.md"]
    write_atomic(paths[0], trials[front_first(trials.columns, axes, metric)].to_csv(index=False))
    tables = render_tables(trials, specs, fits)
    write_atomic(paths[1], tables if note is None else f"{note}\n\n{tables}")
    frames = table_frames(trials, specs, fits)
    csv_names = {specs[0].name: ["table.csv"]}
    if len(specs) > 1:
        for spec in specs:
            csv_names.setdefault(spec.name, []).append(f"table_{spec.name}.csv")
    for name, frame in frames.items():
        for csv_name in csv_names[name]:
            write_atomic(out / csv_name, frame.to_csv(index=False))
            paths.append(out / csv_name)
    return paths + write_plots(trials, curves, specs, out, metric=metric, fits=fits)


def table_frames(
    trials: pd.DataFrame,
    specs: Sequence[TableSpec],
    fits: Mapping[str, list[GroupFit] | str] | None = None,
) -> dict[str, pd.DataFrame]:
    """Each table as table.csv holds it (one row per cell: its keys, ``<value>:<stat>`` and the
    fit's columns), by table name; a table the trials cannot fill is left out."""
    fits = table_fits(trials, specs) if fits is None and not trials.empty else fits or {}
    frames = {}
    for spec in specs:
        try:
            frame = summarise(trials, spec) if not trials.empty else pd.DataFrame()
        except ValueError:
            continue
        frames[spec.name] = with_fit_columns(frame, fits.get(spec.name))
    return frames


def swept_paths(raw_spec: dict | None) -> list[str]:
    """The config paths a parsed search-space file varies: its space keys (joined keys split),
    the seeds, then derived values, in the file's order."""
    if not isinstance(raw_spec, dict):
        return []
    space = raw_spec.get("space") if isinstance(raw_spec.get("space"), dict) else {}
    paths = [p for key in space for p in str(key).split(",")]
    sweep = raw_spec.get("sweep") if isinstance(raw_spec.get("sweep"), dict) else {}
    if sweep.get("seeds") is not None:
        paths.append("train.seed")
    derived = raw_spec.get("derived") if isinstance(raw_spec.get("derived"), dict) else {}
    return list(dict.fromkeys([*paths, *map(str, derived)]))


def front_first(columns: Iterable[str], axes: Sequence[str], metric: str | None) -> list[str]:
    """Columns in reading order: trial id, status, the swept axes, the sweep's metric, then the
    rest as they were."""
    columns = list(columns)
    front = [c for c in ("trial_id", "status", *axes, metric) if c in columns]
    front = list(dict.fromkeys(front))
    return front + [c for c in columns if c not in front]


def with_convergence(
    trials: pd.DataFrame, curves: pd.DataFrame, metric: str | None = None
) -> pd.DataFrame:
    """The trials with a ``convergence`` column (sweeps.analysis.convergence) after
    ``stopped_reason``: the tracker's tag where a run has one, else the label computed from
    ``curves``."""
    if trials.empty:
        return trials
    if "convergence" in trials.columns and trials["convergence"].notna().all():
        return trials
    computed = convergence_column(trials, curves, metric)
    frame = trials.copy()
    if "convergence" in frame.columns:
        frame["convergence"] = frame["convergence"].where(frame["convergence"].notna(), computed)
        return frame
    at = trials.columns.get_loc("stopped_reason") + 1 if "stopped_reason" in trials else 0
    frame.insert(at, "convergence", computed)
    return frame


def log_outputs_to_parent(client: MlflowClient, parent_run_id: str, paths: Iterable[Path]) -> None:
    """Log written outputs as parent-run artifacts: PNGs under plots/, the rest under tables/."""
    for path in paths:
        folder = "plots" if Path(path).suffix == ".png" else "tables"
        client.log_artifact(parent_run_id, str(path), artifact_path=folder)

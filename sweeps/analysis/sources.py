"""A finished sweep, wherever it lies: an output folder of ``python -m sweeps.run`` (its
``trials.csv``, the ``spec.yaml`` copy and ``sweep.json``, which names the MLflow parent run) or
an MLflow sweep, by experiment name (its newest parent run) or as ``run:<parent run id>``.

    load_sweep("results/smoke")                                   # a folder
    load_sweep("smoke", "sqlite:///mlflow.db")                    # the newest sweep named smoke
    load_sweep("run:27d07341...", "sqlite:///mlflow.db")          # one parent run

Both give the trials as ``trials.csv`` holds them: one row per trial, the swept axes first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml
from mlflow.exceptions import MlflowException

from sweeps.analysis import collect
from sweeps.analysis.collect import CollectError
from sweeps.analysis.store import STATE_FILE, default_tracking_uri, read_state
from sweeps.spec.table_block import TableSpec, table_specs_from_block

RUN_PREFIX = "run:"
SOURCES = (
    "a sweep output folder holding trials.csv, an experiment name or run:<parent run id> "
    "(with --tracking-uri)"
)


@dataclass(frozen=True)
class Sweep:
    """One sweep's trials, the search-space file it ran (None when neither the folder nor the
    parent run holds one) and where MLflow keeps it (None for a folder without sweep.json)."""

    label: str
    """The sweep's name: the folder's or the experiment's."""
    trials: pd.DataFrame
    spec: dict | None
    tracking_uri: str | None
    parent_run_id: str | None

    @property
    def metric(self) -> str | None:
        """The spec's ``sweep.metric``: the validation metric its best trial is chosen on."""
        return table_specs_of(self.spec)[1]

    @property
    def tables(self) -> list[TableSpec]:
        """The spec's ``table:`` block, parsed ([] without one)."""
        return table_specs_of(self.spec)[0]


def is_folder(source: str | os.PathLike) -> bool:
    """Whether ``source`` names a folder (an existing one, or a path with a separator) rather
    than an MLflow experiment or run."""
    text = os.fspath(source)
    return Path(text).is_dir() or "/" in text or os.sep in text


def load_sweep(source: str | os.PathLike, tracking_uri: str | None = None) -> Sweep:
    """The sweep ``source`` names (see the module docstring); raises CollectError (one line)."""
    if is_folder(source):
        return _from_folder(Path(source))
    uri = tracking_uri or default_tracking_uri()
    try:
        return _from_mlflow(str(source), uri)
    except MlflowException as err:
        raise CollectError(f"{source}: {' '.join(str(err.message).split())}") from None


def _from_folder(folder: Path) -> Sweep:
    if not folder.is_dir():
        raise CollectError(f"{folder}: no such folder; expected {SOURCES}")
    trials_csv = folder / "trials.csv"
    if not trials_csv.is_file():
        raise CollectError(f"{folder}: no trials.csv in it; expected {SOURCES}")
    try:
        trials = pd.read_csv(trials_csv)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise CollectError(f"{trials_csv}: not a trials table ({err})") from None
    spec_file = folder / "spec.yaml"
    spec = read_spec_file(spec_file) if spec_file.is_file() else None
    state = read_state(folder)
    name = folder.resolve().name
    return Sweep(name, trials, spec, state.get("tracking_uri"), state.get("parent_run_id"))


def _from_mlflow(source: str, uri: str) -> Sweep:
    client = collect.open_client(uri)
    if source.startswith(RUN_PREFIX):
        run_id = source.removeprefix(RUN_PREFIX)
        try:
            run = client.get_run(run_id)
        except MlflowException:
            raise CollectError(f"{source}: no MLflow run with id {run_id!r} in {uri}") from None
        if run.data.tags.get("sweep.role") != "parent":
            raise CollectError(f"{source}: not a sweep's parent run (tag sweep.role=parent)")
        name = client.get_experiment(run.info.experiment_id).name
    else:
        name, run = source, collect.find_parent_run(client, source)
    spec = collect.spec_from_parent(client, run)
    metric = table_specs_of(spec)[1]
    trials, curves = collect.trials_from_mlflow(uri, name, run.info.run_id)
    # As the sweep's end wrote trials.csv: convergence labels, swept axes and metric first.
    trials = collect.with_convergence(trials, curves, metric)
    trials = trials[collect.front_first(trials.columns, collect.swept_paths(spec), metric)]
    return Sweep(name, trials, spec, uri, run.info.run_id)


def read_spec_file(path: Path) -> dict | None:
    """A search-space file (a sweep folder's spec.yaml copy), parsed; None when not a mapping."""
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise CollectError(f"{path}: not YAML ({' '.join(str(err).split())})") from None
    return spec if isinstance(spec, dict) else None


def table_specs_of(spec: dict | None) -> tuple[list[TableSpec], str | None]:
    """(table specs, sweep metric) of a parsed search-space file; ([], None) without one."""
    if spec is None:
        return [], None
    sweep = spec.get("sweep") if isinstance(spec.get("sweep"), dict) else {}
    metric = sweep.get("metric") if isinstance(sweep.get("metric"), str) else None
    return table_specs_from_block(spec.get("table")), metric


def curves_of(sweep: Sweep, metrics: list[str]) -> pd.DataFrame:
    """The sweep's training curves (trial_id, metric, step, value) of ``metrics``, from MLflow
    (a folder's sweep.json says where)."""
    if sweep.parent_run_id is None or sweep.tracking_uri is None:
        raise CollectError(
            f"{sweep.label}: no {STATE_FILE} naming its MLflow run; the curves live in MLflow "
            "only: pass the experiment name with its tracking URI"
        )
    try:
        client = collect.open_client(sweep.tracking_uri)
        runs = collect.child_runs(client, client.get_run(sweep.parent_run_id))
        return collect.curves_frame(client, runs, metrics)
    except MlflowException as err:
        raise CollectError(f"{sweep.label}: {' '.join(str(err.message).split())}") from None

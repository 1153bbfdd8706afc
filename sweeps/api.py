"""The sweeps from Python, for a notebook: one call per thing the commands do.

    import sweeps

    trials = sweeps.load_trials("results/smoke")            # trials.csv as a DataFrame
    curves = sweeps.load_curves("results/smoke")            # (trial_id, metric, step, value)
    print(sweeps.tables(trials, "results/smoke").markdown)  # the sweep's tables
    sweeps.plots(trials, "results/smoke", "figures/")       # its plots as PNG files
    diff = sweeps.compare_sweeps("results/smoke", "results/smoke_long")

A sweep is named as on the command line: an output folder of ``python -m sweeps.run``, an
MLflow experiment (its newest sweep) or ``run:<parent run id>``, the latter two in the store
``tracking_uri`` (default ``$MLFLOW_TRACKING_URI``, else ``./mlflow.db``). Every call is a thin
layer over the modules the commands use, so a notebook gets what they print and write.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sweeps.analysis import collect, comparison, sources
from sweeps.analysis.comparison import Comparison, Side
from sweeps.analysis.plots import CURVE_METRICS, write_plots
from sweeps.analysis.tables import default_table_specs, primary_metric
from sweeps.spec.table_block import TableSpec, table_specs_from_block

__all__ = [
    "Tables",
    "compare_sweeps",
    "load_curves",
    "load_trials",
    "plots",
    "run_spec",
    "tables",
]

SweepRef = str | os.PathLike
# What names a sweep's tables: a search-space file or sweep folder, a parsed spec, its table
# block (a mapping or a list of them), TableSpecs, or None for the default tables.
TableSource = SweepRef | Mapping[str, Any] | Sequence[Any] | TableSpec | None


def load_trials(sweep: SweepRef, tracking_uri: str | None = None) -> pd.DataFrame:
    """One row per trial, as ``trials.csv`` holds them (trial id, status, the swept axes, the
    sweep's metric, then every config value and final metric).

    >>> trials = load_trials("results/smoke")                       # a folder
    >>> trials = load_trials("smoke", "sqlite:///mlflow.db")        # the newest sweep 'smoke'
    >>> trials.groupby("model.d_model")["val/exact_match"].mean()
    """
    return sources.load_sweep(sweep, tracking_uri).trials


def load_curves(
    sweep: SweepRef, tracking_uri: str | None = None, metrics: Iterable[str] | None = None
) -> pd.DataFrame:
    """The training curves, long format: columns trial_id, metric, step, value, of
    ``metrics`` (default the sweep's metric, ``val/exact_match`` and ``train/loss``), read from
    MLflow (a folder's ``sweep.json`` names its store and parent run).

    >>> curves = load_curves("results/smoke", metrics=["val/loss"])
    >>> curves.pivot_table(index="step", columns="trial_id", values="value")
    """
    found = sources.load_sweep(sweep, tracking_uri)
    wanted = list(metrics) if metrics is not None else [found.metric, *CURVE_METRICS]
    return sources.curves_of(found, [m for m in dict.fromkeys(wanted) if m])


@dataclass(frozen=True)
class Tables:
    """A sweep's tables: ``frames`` by table name, each as ``table.csv`` holds it (one row per
    cell: its keys, then ``<value>:<stat>`` columns, ``<key>:chosen`` for a selected table,
    the fit's columns); ``markdown`` as ``table.md`` holds them (a notebook renders it)."""

    frames: dict[str, pd.DataFrame]
    markdown: str

    def _repr_markdown_(self) -> str:
        return self.markdown


def tables(trials: pd.DataFrame, spec: TableSource = None) -> Tables:
    """The scaling tables of ``spec`` (see TableSource) built from ``trials``, as
    ``python -m sweeps.table`` builds them; None: the default tables (the headline metric by
    every axis the trials vary).

    >>> t = tables(trials, "results/smoke")                          # the folder's spec.yaml
    >>> t = tables(trials, {"rows": ["model.d_model"], "values": ["val/loss"]})
    >>> t.frames["table"]["val/loss:mean"]
    """
    specs, _ = _table_specs(trials, spec)
    return Tables(collect.table_frames(trials, specs), collect.render_tables(trials, specs))


def plots(
    trials: pd.DataFrame,
    spec: TableSource,
    out_dir: str | os.PathLike,
    curves: pd.DataFrame | None = None,
) -> list[Path]:
    """The sweep's plots as PNG files in ``out_dir`` (made if missing), as a sweep's end draws
    them; the training curves only when ``curves`` (``load_curves``) are given. Returns their
    paths.

    >>> plots(trials, "results/smoke", "figures/", curves=load_curves("results/smoke"))
    [PosixPath('figures/exact_match_vs_params.png'), PosixPath('figures/training_curves.png')]
    """
    specs, metric = _table_specs(trials, spec)
    curves = curves if curves is not None else pd.DataFrame(columns=list(collect.CURVE_COLUMNS))
    return write_plots(trials, curves, specs, out_dir, metric=metric)


def _table_specs(trials: pd.DataFrame, spec: TableSource) -> tuple[list[TableSpec], str | None]:
    """(table specs, sweep metric or None) of a TableSource."""
    if isinstance(spec, TableSpec):
        return [spec], None
    if isinstance(spec, str | os.PathLike):
        path = Path(spec)
        spec = sources.read_spec_file(path / "spec.yaml" if path.is_dir() else path)
    if isinstance(spec, Mapping) and ({"sweep", "space", "base"} & set(spec)):
        specs, metric = sources.table_specs_of(dict(spec))
    elif isinstance(spec, Sequence) and all(isinstance(s, TableSpec) for s in spec):
        specs, metric = list(spec), None
    else:
        specs, metric = table_specs_from_block(spec), None
    return specs or default_table_specs(trials, metric), metric


def run_spec(
    spec: SweepRef | Mapping[str, Any],
    sets: Sequence[str] = (),
    out: str | os.PathLike = "results",
    tracking_uri: str | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Run a sweep as ``python -m sweeps.run SPEC --set ... --out OUT --tracking-uri URI``
    does (a local Ray, MLflow from the driver, the tables and plots in ``OUT/<name>/``) and
    return its trials. ``spec``: a search-space file or the same as a dict; ``options``: the
    command's other flags (``resume``, ``overwrite``, ``address``, ``storage``,
    ``storage_shared``). A mistake in the spec raises SpecError (its one line); a sweep that
    ends with a non-zero exit code raises RuntimeError after printing why.

    >>> trials = run_spec(
    ...     "search_spaces/smoke.yaml", sets=["base.train.max_steps=20"], out="/tmp/r"
    ... )
    """
    from sweeps.analysis.store import default_tracking_uri
    from sweeps.runtime.driver import run_sweep
    from sweeps.spec.spec_file import apply_overrides
    from sweeps.spec.sweep_spec import load_spec, parse_spec

    if isinstance(spec, Mapping):
        parsed = parse_spec(apply_overrides(dict(spec), list(sets)))
    else:
        parsed = load_spec(spec, list(sets))
    out_dir = Path(out).resolve() / parsed.name
    code = run_sweep(parsed, out_dir, tracking_uri or default_tracking_uri(), **options)
    if code != 0:
        raise RuntimeError(f"sweep {parsed.name!r} ended with exit code {code} (printed above)")
    return load_trials(out_dir)


def compare_sweeps(
    a: SweepRef,
    b: SweepRef,
    *more: SweepRef,
    tracking_uri: str | None = None,
    metric: str | None = None,
    keys: Sequence[str] | None = None,
    select_by: str | None = None,
) -> pd.DataFrame:
    """Two or more sweeps on the keys they share, as ``python -m sweeps.compare`` prints them:
    indexed by the shared keys, ``<sweep>:mean``, ``<sweep>:std``, ``<sweep>:n`` per sweep (and
    ``<sweep>:<key>`` for a key it chose per cell on validation), and ``<sweep> - <first>``.
    ``metric`` defaults to the first sweep's test exact match (validation's without a test set).

    >>> diff = compare_sweeps("results/smoke", "results/smoke_long", metric="val/loss")
    >>> diff["smoke_long - smoke"]
    """
    result = compare_loaded(
        [a, b, *more], tracking_uri, metric=metric, keys=keys, select_by=select_by
    )
    return result.frame


def compare_loaded(
    refs: Sequence[SweepRef],
    tracking_uri: str | None = None,
    *,
    metric: str | None = None,
    keys: Sequence[str] | None = None,
    select_by: str | None = None,
) -> Comparison:
    """Load every sweep and compare them (``sweeps.analysis.comparison.compare``); the metric
    defaults to the first sweep's headline (test exact match where it has one). Raises
    CollectError or ValueError, one line each."""
    if len(refs) < 2:
        raise ValueError(f"SWEEP: {len(refs)} given: compare needs two or more")
    found = [sources.load_sweep(source, tracking_uri) for source in refs]
    labels = [s.label for s in found]
    if len(set(labels)) < len(labels):  # two runs of one spec: tell them apart by where
        labels = [os.fspath(ref) for ref in refs]
    sides = [
        Side(label, s.trials, s.tables, s.metric) for label, s in zip(labels, found, strict=True)
    ]
    metric = metric or primary_metric(sides[0].trials)
    return comparison.compare(sides, metric, keys, select_by)

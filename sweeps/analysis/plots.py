"""A sweep's figures by file stem (``plots_for``): which of the figure kinds the trials
support, each drawn by its own module (``plot_size``, ``plot_heatmaps``, ``plot_curves``, on the
shared axes and styles of ``plot_style``). The figure functions are named here too, so a caller
has one place to import them from, and the constants callers read (MARKERS, MAX_LEVELS,
CURVE_METRICS)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from sweeps.analysis.phases import PHASE_COLUMN
from sweeps.analysis.plot_curves import (
    CURVE_METRICS,
    LENGTH_COLUMN,
    exact_match_by_length,
    label_title,
    training_curves,
    trial_labels,
)
from sweeps.analysis.plot_heatmaps import (
    BATCH_LR,
    MAX_LEVELS,
    WIDTH_DEPTH,
    batch_lr_heatmap,
    heatmap,
    width_depth_heatmap,
)
from sweeps.analysis.plot_lengths import has_length_grid, length_heatmap
from sweeps.analysis.plot_phases import LR_WD, phase_map
from sweeps.analysis.plot_size import BUDGET, exact_match_by_op, exact_match_vs_params, isoflop
from sweeps.analysis.plot_style import MARKERS, figure_title, sweep_context, with_context
from sweeps.analysis.power_law import GroupFit
from sweeps.analysis.store import write_figure
from sweeps.analysis.table_fits import table_fits
from sweeps.analysis.tables import primary_metric, select_trials, varied_axes
from sweeps.spec.table_block import TableSpec

__all__ = [
    "BATCH_LR",
    "BUDGET",
    "CURVE_METRICS",
    "LENGTH_COLUMN",
    "LR_WD",
    "MARKERS",
    "MAX_LEVELS",
    "WIDTH_DEPTH",
    "batch_lr_heatmap",
    "exact_match_by_length",
    "exact_match_by_op",
    "exact_match_vs_params",
    "heatmap",
    "isoflop",
    "label_title",
    "length_heatmap",
    "phase_map",
    "plots_for",
    "shown_metric",
    "training_curves",
    "trial_labels",
    "width_depth_heatmap",
    "write_plots",
]


def plots_for(
    trials: pd.DataFrame,
    curves: pd.DataFrame,
    metric: str | None = None,
    specs: Sequence[TableSpec] = (),
    fits: Mapping[str, list[GroupFit] | str] | None = None,
    sweep: str | None = None,
) -> dict[str, Figure]:
    """The plots this sweep supports, by file stem, each titled first with the sweep's name
    and its task (``sweep_context``: a figure copied out of its folder still says what it is).
    Heatmaps only where both axes vary; the metric against parameters over the cells of the
    first selected table (with its fit where it fits the metric against n_params);
    ``fit_<table>`` for every other fitted table; an isoFLOP plot where ``train.flops_budget``
    varies; each operation's exact match against parameters where a multi-operation sweep
    varies the size; exact match by operand length where the trials have a longer-than-trained
    set; the length grid's heatmaps where they measured one; the phase map where learning rate
    and weight decay both vary over a grid and the trials have phases
    (``sweeps.analysis.phases``). The size plot and the heatmaps show ``shown_metric``: the
    exact match the tables report."""
    metric = shown_metric(trials, metric, specs)
    fits = fits or {}
    axes = varied_axes(trials)
    figures: dict[str, Figure] = {}
    has_metric = metric in trials.columns and trials[metric].notna().any()
    shown = next((s for s in specs if s.select is not None and metric in s.values), None)
    overlay = next((s for s in specs if s.fit and (s.fit.x, s.fit.y) == ("n_params", metric)), None)
    shown = shown or overlay
    if has_metric and "n_params" in trials.columns and trials["n_params"].notna().any():
        figures["exact_match_vs_params"] = _size_plot(trials, metric, "n_params", shown, fits)
        if "test/exact_match/mul" in trials and trials["n_params"].nunique() > 1:
            figures["exact_match_by_op"] = exact_match_by_op(trials)
    for spec in specs:
        if spec.fit is None or spec is overlay:
            continue
        if {spec.fit.x, spec.fit.y} <= set(trials.columns):
            figures[f"fit_{spec.name}"] = _size_plot(trials, spec.fit.y, spec.fit.x, spec, fits)
    if has_metric and all(a in axes for a in WIDTH_DEPTH):
        figures["width_x_depth"] = width_depth_heatmap(trials, metric)
    if has_metric and all(a in axes for a in BATCH_LR):
        figures["batch_size_x_lr"] = batch_lr_heatmap(trials, metric)
    if PHASE_COLUMN in trials.columns and all(_few_levels(trials, a, axes) for a in LR_WD):
        figures["phase_map"] = phase_map(trials)
    if BUDGET in axes and "n_params" in trials.columns:
        figures["isoflop"] = isoflop(trials)
    if any(c.startswith("longer/") and LENGTH_COLUMN.match(c) for c in trials.columns):
        figures["exact_match_by_length"] = exact_match_by_length(trials)
    if has_length_grid(trials):
        figures["length_heatmap"] = length_heatmap(trials)
    if len(curves):
        labels, title = trial_labels(trials), label_title(trials)
        figures["training_curves"] = training_curves(curves, labels=labels, legend_title=title)
    context = sweep_context(trials, sweep)
    for figure in figures.values():
        with_context(figure, context)
    return figures


def shown_metric(
    trials: pd.DataFrame, metric: str | None = None, specs: Sequence[TableSpec] = ()
) -> str:
    """The exact match the figures of a metric show: the first one the tables report (the
    ``table:`` block's values), so that a figure and the table printed beside it give one
    number (the sweep's metric is validation's, a table's is often the test set's); without
    one, ``metric`` where it is an exact match, else ``primary_metric``."""
    reported = (v for s in specs for v in s.values if v.endswith("exact_match"))
    found = next((v for v in reported if v in trials and trials[v].notna().any()), None)
    if found is not None:
        return found
    if metric is None or "exact_match" not in metric:  # the figures are of exact match
        return primary_metric(trials)
    return metric


def _few_levels(trials: pd.DataFrame, axis: str, axes: Sequence[str]) -> bool:
    """Whether ``axis`` varies over a grid's few values (a random search's draws would leave
    a cell per trial, nearly all of them empty)."""
    return axis in axes and trials[axis].nunique() <= MAX_LEVELS


def _size_plot(
    trials: pd.DataFrame,
    metric: str,
    x: str,
    spec: TableSpec | None,
    fits: Mapping[str, list[GroupFit] | str],
) -> Figure:
    """``exact_match_vs_params`` over a table's selected cells, with its fits where they are of
    this metric against this x."""
    if spec is None:
        return exact_match_vs_params(trials, metric, x=x)
    groups = fits.get(spec.name)
    drawn = spec.fit is not None and (spec.fit.x, spec.fit.y) == (x, metric)
    return exact_match_vs_params(
        select_trials(trials, spec),
        metric,
        x=x,
        cells=[*spec.rows, *spec.columns] or None,
        chosen=spec.select.over if spec.select is not None else (),
        fits=groups if drawn and isinstance(groups, list) else (),
        fit_spec=spec.fit if drawn else None,
    )


def write_plots(
    trials: pd.DataFrame,
    curves: pd.DataFrame,
    specs: Sequence[TableSpec],
    out_dir: str | Path,
    *,
    metric: str | None = None,
    fits: Mapping[str, list[GroupFit] | str] | None = None,
    sweep: str | None = None,
) -> list[Path]:
    """The sweep's plots (``plots_for``) as PNGs in ``out_dir``; their paths. ``sweep``: the
    name their titles give, by default the folder's (a sweep's outputs go to OUT/<name>)."""
    if trials.empty:
        return []
    fits = table_fits(trials, specs) if fits is None else fits
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    sweep = out.name if sweep is None else sweep
    for stem, figure in plots_for(trials, curves, metric, specs, fits, sweep).items():
        write_figure(out / f"{stem}.png", figure, dpi=120, metadata={"Title": figure_title(figure)})
        paths.append(out / f"{stem}.png")
    return paths

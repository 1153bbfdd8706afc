"""What every figure of ``sweeps.analysis`` shares: the Agg backend, markers and line styles,
legend size, tick labels people read (10K, 1.5M) and the choice of a y axis for a metric.

Figures are built with ``matplotlib.figure.Figure`` directly rather than pyplot, so a sweep
that draws many of them keeps no global figure registry alive and needs no display.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from collections.abc import Mapping

import pandas as pd
from matplotlib import ticker

from sweeps.spec.metrics import is_fraction

MAX_LEGEND = 12
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
# Line styles cycled with colour, so flat curves lying on top of each other stay apart.
LINE_STYLES = ("-", "--", ":", "-.")
# The y range of a fraction of right answers: 0-1 with a little room either side, so points
# at 0 and at 1 stay visible.
FRACTION_YLIM = (-0.03, 1.03)
# The set a metric's namespace was measured on, in words for a figure (``arith.data.dataset``'s
# sets); ``best/`` is a set's best evaluation.
SET_NAMES = {
    "train": "training set",
    "val": "validation set",
    "test": "test set",
    "ood": "out-of-distribution set",
    "longer": "longer-than-trained set",
    "longer_val": "longer-than-trained validation set",
    "edge": "edge cases",
    "carry": "carry set",
    "cascade": "cascade set",
    "lengths": "length grid",
}


def short(path: str) -> str:
    """The last part of a dotted config path, for a legend: ``model.d_model`` -> ``d_model``."""
    return path.rsplit(".", 1)[-1]


def measured_on(metric: str) -> str | None:
    """The set ``metric`` was measured on, in words: ``test/exact_match`` -> ``test set``,
    ``best/val/exact_match`` -> ``validation set, best evaluation``; None where the name has
    no set's namespace (``n_params``, ``perf/tokens_per_s``)."""
    namespace, _, rest = metric.partition("/")
    if namespace == "best" and rest:
        inner = measured_on(rest)
        return None if inner is None else f"{inner}, best evaluation"
    return SET_NAMES.get(namespace) if rest else None


def metric_label(metric: str) -> str:
    """A metric with its set in words, for a title: ``test/exact_match (test set)``."""
    where = measured_on(metric)
    return metric if where is None else f"{metric} ({where})"


def short_number(value: float, _pos: object = None) -> str:
    """Tick labels people read: 3K, 100K, 1.5M, 2G; 0.01, 0.5, 3 below a thousand."""
    if value <= 0:
        return f"{value:g}"
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def readable_log_ticks(axis) -> None:
    """A log axis labelled 10K, 30K, 100K (with minor labels where it spans a decade or less)."""
    axis.set_major_formatter(ticker.FuncFormatter(short_number))
    low, high = axis.get_data_interval()
    few_decades = low > 0 and high / low <= 100
    axis.set_minor_locator(ticker.LogLocator(subs=(2.0, 3.0, 5.0)))
    axis.set_minor_formatter(
        ticker.FuncFormatter(short_number) if few_decades else ticker.NullFormatter()
    )


def log_scaled_loss(metric: str, values: pd.Series) -> bool:
    """Whether ``values`` of ``metric`` go on a log y axis: a loss, positive throughout. A loss
    can fall by orders of magnitude over training and across sizes, and a log axis keeps all of
    that fall readable. This chooses an axis, not which way is better (``metric_direction``):
    an error or a number of steps, also better low, stays on a linear axis."""
    return "loss" in metric and len(values) > 0 and bool((values > 0).all())


def metric_y_axis(ax, metric: str, values: pd.Series) -> None:
    """The y axis for ``metric``: a fraction of right answers (``is_fraction``) on 0-1
    (FRACTION_YLIM); a positive loss on a log axis (``log_scaled_loss``); anything else as
    matplotlib scales it."""
    if is_fraction(metric):
        ax.set_ylim(*FRACTION_YLIM)
    elif log_scaled_loss(metric, values):
        ax.set_yscale("log")
        readable_log_ticks(ax.yaxis)


# A trial's task and format in words, for a figure that is read out of its folder.
FORMAT_WORDS = {
    "plain": "plain digits",
    "spaced": "spaced digits",
    "reversed": "reversed answers",
    "carry_trace": "carry traces",
    "base100": "base 100",
}
MODULAR_WORDS = {
    "add": "addition",
    "sub": "subtraction",
    "mul": "multiplication",
    "div": "division",
}


def task_words(config: Mapping[str, object]) -> str:
    """``3-digit addition, base 100`` from a trial's flat config (a trials row, or
    ``RunConfig.flat()``): its task, its size and its format."""
    name, digits = config.get("task.name"), config.get("task.n_digits")
    if name == "modular":
        operation = MODULAR_WORDS.get(str(config.get("task.operation")), "arithmetic")
        task = f"modular {operation} mod {config.get('task.modulus')}"
    elif name == "sorting":
        task = f"sorting up to {config.get('task.max_items')} items"
    elif name == "multi_op":
        task = f"{digits}-digit {' '.join(_listed(config.get('task.ops')))}"
    else:
        task = f"{digits}-digit {name}"
    form = config.get("format.name")
    return f"{task}, {FORMAT_WORDS.get(str(form), form)}" if form is not None else task


def _listed(value: object) -> list[str]:
    """A list param as MLflow gives it back (``"['+', '-']"``), or as a config holds it."""
    if isinstance(value, str):
        return [part.strip(" '\"") for part in value.strip("[]()").split(",") if part.strip()]
    return [str(v) for v in value or ()]


def sweep_context(trials: pd.DataFrame, sweep: str | None) -> str | None:
    """``width_vs_depth · 3-digit addition, base 100``: the sweep and its tasks (each once),
    the line that lets a figure say what it is out of its folder; None with neither."""
    tasks = list(dict.fromkeys(task_words(row) for row in trials.to_dict("records")))
    tasks = [t for t in tasks if not t.startswith("None-digit")]  # trials without a task column
    parts = [p for p in (sweep, "; ".join(tasks)) if p]
    return " · ".join(parts) or None


def with_context(fig, context: str | None) -> None:
    """``context`` as the figure's first title line, above its own suptitle if it has one."""
    if not context:
        return
    own = fig.get_suptitle()
    fig.suptitle(f"{context}\n{own}" if own else context, fontsize="medium")


def figure_title(fig) -> str:
    """Every title of a figure on one line, suptitle first (`` | `` between them): what a PNG
    of it carries as its Title, so that a copy of it can be told by what it shows."""
    own = fig.get_suptitle()
    titles = [own, *(ax.get_title() for ax in fig.axes)]
    return " | ".join(" ".join(t.split()) for t in titles if t.strip())


def line_colours(n: int) -> list:
    """``n`` colours told apart at a glance: a qualitative palette where it has enough (tab10,
    then tab20), else evenly spread viridis. Lines of a sequential map sat so close that 128 x 2
    and 128 x 1 looked one colour."""
    import numpy as np

    for name, size in (("tab10", 10), ("tab20", 20)):
        if n <= size:
            return [matplotlib.colormaps[name](i) for i in range(n)]
    return list(matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, n)))

"""A trial's diagnostics drawn: its data (answers, carry chains) and its embeddings' paths.

``arith.training.diagnostics`` measures them as numbers and exports them from a trial's
checkpoint; ``draw_diagnostics`` draws these figures beside them (in a sweep, on the MLflow
writer thread: ``sweeps.tracking.records``), and ``write_diagnostics`` does both at once:

- ``diagnostics/answers.png``: the answer's value and length, training against each
  evaluation set, as shares of the set (training holds far more problems);
- ``diagnostics/carries.png``: the longest carry chain, the same way;
- ``embeddings.png``: each token's embedding at every evaluation on the two principal
  components of the final table, a line per token from a circle (start) to a square (end),
  labelled with the token's text where the label has room (seed 001).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from arith.training import diagnostics as arith_diagnostics
from sweeps.analysis.plot_style import MARKERS, task_words, with_context
from sweeps.analysis.store import write_figure

MARGINS = {"left": 0.12, "right": 0.97, "bottom": 0.14, "top": 0.88}
"""Fixed margins: the driver draws these for every trial as it ends, and ``tight_layout``
would double the time of each figure."""
NO_CHAIN = "-1"
"""``arith.training.diagnostics``'s carry-chain key of a problem whose operation has none."""
LABEL_PT = 7
"""A token label's font size in points, from which its box is estimated."""
LABEL_BOX = {"boxstyle": "square,pad=0.05", "fc": "white", "alpha": 0.7, "lw": 0}
"""A pale ground under a label, so the lines through it do not cross its text."""


def _shares(counts: list[int] | np.ndarray) -> np.ndarray:
    counts = np.asarray(counts, dtype=float)
    return counts / max(counts.sum(), 1.0)


def _grouped_bars(ax, labels: list[str], shares: dict[str, np.ndarray]) -> None:
    """One bar per set side by side at each label, training first."""
    width = 0.8 / max(len(shares), 1)
    x = np.arange(len(labels))
    for i, (name, values) in enumerate(shares.items()):
        ax.bar(x + (i - (len(shares) - 1) / 2) * width, values, width, label=name)
    ax.set_xticks(x, labels, fontsize=7, rotation=90 if len(labels) > 12 else 0)
    ax.set_ylabel("share of the set")


def _keyed_shares(sets: dict[str, Any], key: str) -> tuple[list[str], dict[str, np.ndarray]]:
    """Counts ``{value: n}`` of every set on the union of their values, as shares."""
    values = sorted({int(v) for s in sets.values() for v in s[key]})
    shares = {name: _shares([s[key].get(str(v), 0) for v in values]) for name, s in sets.items()}
    return [str(v) for v in values], shares


def answers_figure(data: dict[str, Any]) -> Figure:
    """The answer's value (the run's common bins) and length, per set."""
    sets = data["sets"]
    fig = Figure(figsize=(11, 4))
    value_ax, length_ax = fig.subplots(1, 2)
    edges = np.asarray(data["value_edges"])
    centres, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    for i, (name, s) in enumerate(sets.items()):
        shares = _shares(s["answer_value"])
        value_ax.step(centres, shares, where="mid", label=f"{name} ({s['size']})")
        value_ax.plot(centres, shares, MARKERS[i % len(MARKERS)], markersize=3, color="C" + str(i))
    value_ax.set_xlim(edges[0] - width[0] / 2, edges[-1] + width[-1] / 2)
    value_ax.set_xlabel("answer value")
    value_ax.set_ylabel("share of the set")
    value_ax.legend(fontsize=7)
    labels, shares = _keyed_shares(sets, "answer_length")
    _grouped_bars(length_ax, labels, shares)
    length_ax.set_xlabel("answer length (digits)")
    length_ax.legend(fontsize=7)
    fig.suptitle("answers: training against each evaluation set")
    fig.subplots_adjust(**MARGINS, wspace=0.25)
    return fig


def carries_figure(data: dict[str, Any]) -> Figure:
    """The longest carry (or borrow) chain, per set; ``none`` for operations without one."""
    labels, shares = _keyed_shares(data["sets"], "carry_chain")
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    _grouped_bars(ax, ["none" if v == NO_CHAIN else v for v in labels], shares)
    ax.set_xlabel("longest carry chain (columns)")
    ax.legend(fontsize=7)
    overlap = ", ".join(
        f"{name}∩{other} {n}" for name, pair in data["overlap"].items() for other, n in pair.items()
    )
    ax.set_title(f"carry chains (overlaps: {overlap})", fontsize=8)
    fig.subplots_adjust(**MARGINS)
    return fig


def embeddings_figure(track: dict[str, Any]) -> Figure:
    """A line per token used in training through its (PC1, PC2) at each evaluation, from a
    circle at the first to a square at the last, labelled with the token's text there where
    the label has room (``_labelled``): base 100's hundred digits would pile up otherwise."""
    fig = Figure(figsize=(7, 6))
    ax = fig.subplots()
    coords = np.asarray(track["coords"])  # (vocab, S, k)
    if coords.shape[2] == 1:  # a one-wide table has one component
        coords = np.concatenate([coords, np.zeros_like(coords)], axis=2)
    palette = colormaps["tab20"]  # more tokens than the default cycle's 10 colours
    used = list(track["used"] or range(len(track["tokens"])))
    texts = [track["tokens"][t] if track["tokens"][t].strip() else "␣" for t in used]
    for n, token in enumerate(used):
        path, colour = coords[token], palette(n % palette.N)
        ax.plot(path[:, 0], path[:, 1], "-", color=colour, linewidth=0.8, alpha=0.5)
        ax.plot(*path[0], "o", color=colour, markersize=3, alpha=0.5)
        ax.plot(*path[-1], "s", color=colour, markersize=5)
    paths = coords[used][:, :, :2]  # (used, S, 2)
    for n, left in _labelled(paths[:, -1], texts, paths.reshape(-1, 2), _axes_size_pt(fig)):
        ax.annotate(texts[n], paths[n, -1], fontsize=LABEL_PT, xytext=(-3 if left else 3, 3),
                    textcoords="offset points", ha="right" if left else "left",
                    bbox=LABEL_BOX)  # fmt: skip
    pc1, pc2 = [*track["explained_variance"], 0.0][:2]
    ax.set_xlabel(f"PC1 of the final embeddings ({pc1:.0%})")
    ax.set_ylabel(f"PC2 ({pc2:.0%})")
    steps = track["steps"]
    shown = len(ax.texts)
    note = "" if shown == len(used) else f"; {shown} of {len(used)} tokens labelled, others overlap"
    ax.set_title(f"token embeddings, steps {steps[0]} (o) to {steps[-1]} (■){note}", fontsize=9)
    fig.subplots_adjust(**MARGINS)
    return fig


def _axes_size_pt(fig: Figure) -> tuple[float, float]:
    """The axes' width and height in points under MARGINS."""
    width, height = fig.get_size_inches() * 72
    across, up = MARGINS["right"] - MARGINS["left"], MARGINS["top"] - MARGINS["bottom"]
    return across * width, up * height


def _labelled(
    ends: np.ndarray, texts: list[str], spans: np.ndarray, size_pt: tuple[float, float]
) -> list[tuple[int, bool]]:
    """Which tokens get a label and on which side: ``(index, left)``, greedily, the tokens that
    are not digits first (operators, end of sequence), then the farthest from the middle; a
    label is drawn only where its box overlaps none drawn before. ``ends``: the tokens' last
    points; ``spans``: every point drawn (the axes' limits with matplotlib's 5 % margins)."""
    low, high = spans.min(0), spans.max(0)
    pad = np.where(high > low, (high - low) * 0.05, 0.5)
    low, high = low - pad, high + pad
    where = (ends - low) / (high - low)  # (n, 2) in axes fractions
    middle = np.median(where, axis=0)
    order = sorted(range(len(texts)),
                   key=lambda n: (texts[n].isdigit(), -np.hypot(*(where[n] - middle))))  # fmt: skip
    boxes, kept = [], []
    for n in order:
        width = (3 + 0.62 * LABEL_PT * len(texts[n])) / size_pt[0]
        height = (3 + 1.3 * LABEL_PT) / size_pt[1]
        left = where[n, 0] + width > 1
        x0 = where[n, 0] - width if left else where[n, 0]
        box = (x0, where[n, 1], x0 + width, where[n, 1] + height)
        if any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes):
            continue
        boxes.append(box)
        kept.append((n, bool(left)))
    return kept


def write_diagnostics(
    checkpoint_dir: Path, into: Path, member: int | None = None, title: str | None = None
) -> list[Path]:
    """The numbers of a trial's checkpoint (``arith.training.diagnostics.export``) and their
    figures, under ``into`` as the trial's run lays them out; the files (none without
    diagnostics)."""
    written = arith_diagnostics.export(checkpoint_dir, into, member)
    return written + draw_diagnostics(into, written, title)


def trial_title(sweep: str, trial_id: str, config: dict[str, Any]) -> str:
    """``width_vs_depth · trial a188b_00002 · 3-digit addition, base 100``: what a trial's
    figure is of, read out of its folder (``config``: the trial's flat run config)."""
    return f"{sweep} · trial {trial_id} · {task_words(config)}"


def draw_diagnostics(into: Path, numbers: list[Path], title: str | None = None) -> list[Path]:
    """The figures of the numbers files ``numbers`` (``arith.training.diagnostics.export``'s),
    under ``into``, each titled first with ``title`` (``trial_title``); the files drawn. Figure
    objects only (no pyplot state), so any one thread may draw: the sweep's MLflow writer
    thread does (``sweeps.tracking.records``)."""
    drawn = []
    for name, fig in diagnostic_figures(numbers, title).items():
        write_figure(into / name, fig, dpi=100)
        drawn.append(into / name)
    return drawn


def diagnostic_figures(numbers: list[Path], title: str | None = None) -> dict[str, Figure]:
    """The figures of the numbers files ``numbers``, by the name each is saved under."""
    figures: dict[str, Figure] = {}
    for path in numbers:
        values = json.loads(path.read_text())
        if path.name == Path(arith_diagnostics.DATA_JSON).name:
            figures["diagnostics/answers.png"] = answers_figure(values)
            figures["diagnostics/carries.png"] = carries_figure(values)
        else:
            figures["embeddings.png"] = embeddings_figure(values)
    if title:
        for fig in figures.values():  # a line more at the top, above the figure's own title
            with_context(fig, title)
            fig.subplots_adjust(top=MARGINS["top"] - 0.08)
    return figures

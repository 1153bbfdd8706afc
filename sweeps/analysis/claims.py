"""What each shipped search space exists to show, the seed's claim, and the check of a run.

A check reads the measured trials (``trials.csv`` columns: dotted config paths, metrics,
``n_params``, ``steps``, ``status``) and returns sentences, each saying whether a bar of the
findings issue was met. Every figure in a sentence comes from the trials, none is typed here;
the seed claims are quoted from the seed documents (``shared/seeds``).

Honest numbers: every bar below is fixed before a run, from the seed or the findings issue,
never from what a run measured; every "best" (cell, shape, arm) is chosen on a validation set
(``val/exact_match``, mean over seeds per cell; ``longer_val/`` for length) and reported on a
held-out one (``test/``, ``longer/``); a bar whose data is absent reads "not measured".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

Frames = dict[str, pd.DataFrame]

LADDER_BAR = 0.99
"""The findings issue's bar for the best cell of a size ladder (test exact match)."""
DIP_STANDARD_ERRORS = 2.0
"""A size ladder still "rises" through a rung that sits below the one before by no more than
this many standard errors of the difference of the two test-set estimates,
``sqrt(p1 (1 - p1) / n + p2 (1 - p2) / n)`` with ``n = data.test_size``: two binomial estimates
of one accuracy differ by more than two standard errors about one time in twenty."""
GROK_THRESHOLD = 0.95
"""Seed 003 counts a run as grokked at 95 % exact match."""
LENGTH_BAR = 0.9
"""The findings issue's bar for an Abacus arm on longer operands (McLeish et al. 2024 report up
to 99 % at five times the trained length)."""
LEARNED_CEILING = 0.05
"""Seed 001's notebook: learned positions score 0 % on longer operands; "near 0" is under 5 %."""
CHOOSE_ON = "val/exact_match"
"""The metric every "best" is chosen on (mean over seeds per cell)."""
NOT_MEASURED = "**not measured**"


@dataclass(frozen=True)
class Claim:
    space: str
    """The search space, ``search_spaces/<space>.yaml``; also its sweep (experiment) name."""
    seed: str
    """Which seed document and part the space reproduces."""
    claim: str
    """What the seed document reports, in words."""
    check: Callable[[Frames], list[str]]
    """Sentences on what the run shows, from the trials of each sweep by name."""
    companions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Further sweeps of the same spec run side by side: sweep name -> ``--set`` overrides."""
    plot: str | None = None
    """The figure that shows the phenomenon (a key of ``sweeps.analysis.plots.plots_for``), if
    not the report's default choice."""


def _pct(x: float) -> str:
    return "not measured" if x is None or not np.isfinite(x) else f"{100 * x:.1f} %"


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def _bar(value: float, ok: Callable[[float], bool]) -> str:
    """The verdict of ``ok(value)``, or "not measured" where the value is absent."""
    if value is None or not np.isfinite(value):
        return NOT_MEASURED
    return _verdict(bool(ok(value)))


def _measured(trials: pd.DataFrame, name: str) -> bool:
    return name in trials.columns and _col(trials, name).notna().any()


def _col(trials: pd.DataFrame, name: str) -> pd.Series:
    if name not in trials.columns:
        return pd.Series(np.nan, index=trials.index, dtype=float)
    return pd.to_numeric(trials[name], errors="coerce")


def _cells(trials: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    """Mean and std of ``metric`` over seeds per combination of ``keys``."""
    frame = trials.assign(_m=_col(trials, metric))
    keys = [k for k in keys if k in frame.columns]
    if not keys:
        return pd.DataFrame({"mean": [frame["_m"].mean()], "std": [frame["_m"].std()]})
    grouped = frame.groupby(keys, dropna=False)["_m"]
    return pd.DataFrame({"mean": grouped.mean(), "std": grouped.std()}).reset_index()


def _chosen(trials: pd.DataFrame, keys: list[str], reported: str, on: str = CHOOSE_ON):
    """The cell (mean over seeds per combination of ``keys``) with the highest ``on``, as a row
    holding ``keys``, ``chosen`` (its ``on``) and ``reported`` (its ``reported``); None when
    ``on`` was not measured: a best is never picked on the figure it reports."""
    if not _measured(trials, on):
        return None
    choice = _cells(trials, keys, on).rename(columns={"mean": "chosen"})
    figure = _cells(trials, keys, reported)["mean"]
    choice = choice.assign(reported=figure.to_numpy()).dropna(subset=["chosen"])
    return choice.loc[choice["chosen"].idxmax()] if len(choice) else None


def _best_cell(trials: pd.DataFrame) -> str:
    if "n_params" not in trials.columns:
        return f"Best cell: {NOT_MEASURED} (no n_params column)."
    best = _chosen(trials, ["n_params"], "test/exact_match")
    if best is None:
        return f"Best cell: {NOT_MEASURED} (no {CHOOSE_ON} to choose it on)."
    return (
        f"Best cell, chosen on validation ({_pct(best['chosen'])} {CHOOSE_ON}): "
        f"{int(best['n_params']):,} parameters, {_pct(best['reported'])} test exact match "
        f"(bar >= {_pct(LADDER_BAR)}: {_bar(best['reported'], lambda v: v >= LADDER_BAR)})."
    )


def ladder_rises(cells: pd.DataFrame, test_size: float) -> bool:
    """Whether no rung of ``cells`` (mean test exact match by n_params, sorted) sits below the
    one before by more than DIP_STANDARD_ERRORS standard errors of their difference."""
    p = cells["mean"].to_numpy(dtype=float)
    variance = p * (1 - p) / test_size
    allowed = DIP_STANDARD_ERRORS * np.sqrt(variance[1:] + variance[:-1])
    return bool((np.diff(p) >= -allowed).all())


def _rise_line(trials: pd.DataFrame, cells: pd.DataFrame) -> str:
    ladder = ", ".join(
        f"{int(n):,} -> {_pct(m)}" for n, m in zip(cells.n_params, cells["mean"], strict=True)
    )
    rule = f"no rung below the one before by more than {DIP_STANDARD_ERRORS:g} standard errors"
    sizes = _col(trials, "data.test_size").dropna().unique()
    if len(cells) < 2 or cells["mean"].isna().any():
        verdict = NOT_MEASURED
    elif len(sizes) != 1:  # the resolution of the estimates is unknown (or not one)
        verdict = f"{NOT_MEASURED} (no single data.test_size to take the standard error from)"
    else:
        rule += f" of a test set of {int(sizes[0]):,}"
        verdict = _verdict(ladder_rises(cells, float(sizes[0])))
    return f"Along the parameter ladder ({ladder}) accuracy rises, {rule}: {verdict}."


def _size_ladder(frames: Frames, near: int | None, seed_figure: float) -> list[str]:
    trials = frames["main"]
    cells = _cells(trials, ["n_params"], "test/exact_match").sort_values("n_params")
    out = [_best_cell(trials), _rise_line(trials, cells)]
    if near is not None and len(cells) and "n_params" in cells:
        row = cells.iloc[int((cells.n_params - near).abs().argmin())]
        out.append(
            f"The rung nearest the seed's {near:,}-parameter model ({int(row.n_params):,} "
            f"parameters) reaches {_pct(row['mean'])}, against the seed's {_pct(seed_figure)}."
        )
    return out


def _width_vs_depth(frames: Frames) -> list[str]:
    out = _size_ladder(frames, 253_000, 0.376)
    shape = ["model.d_model", "model.n_layer"]
    trials = frames["main"]
    if not set(shape) <= set(trials.columns):
        return out
    top = _chosen(trials, shape, "test/exact_match")
    if top is None:
        out.append(f"The best shape: {NOT_MEASURED} (no {CHOOSE_ON} to choose it on).")
    else:
        out.append(
            f"The best shape, chosen on validation ({_pct(top['chosen'])}), is "
            f"{int(top['model.d_model'])} wide x {int(top['model.n_layer'])} deep: "
            f"{_pct(top['reported'])} test exact match."
        )
    return out


def _grokking(frames: Frames) -> list[str]:
    trials = frames["main"]
    val = _col(trials, "val/exact_match")
    wd = _col(trials, "optim.weight_decay")
    steps = _col(trials, "val/steps_to_threshold")
    out = []
    for decay in sorted(wd.dropna().unique()):
        rows = wd == decay
        grokked = int((val[rows] >= GROK_THRESHOLD).sum())
        reached = steps[rows].dropna()
        when = (
            f"; steps to 95 % validation {reached.mean():,.0f} ± {reached.std(ddof=1):,.0f}"
            if len(reached) > 1
            else (f"; steps to 95 % validation {reached.iloc[0]:,.0f}" if len(reached) else "")
        )
        out.append(
            f"weight decay {decay:g}: {grokked} of {int(rows.sum())} seeds grok "
            f"(final validation {_pct(val[rows].mean())} ± {_pct(val[rows].std())}){when}."
        )
    return [*out, _grokking_verdict(val, wd)]


def _grokking_verdict(val: pd.Series, wd: pd.Series) -> str:
    """Met only where both a decay > 0 group and a decay-0 group ran and were measured: the
    claim is a contrast, and a group that did not run cannot show its side of it."""
    claim = "Every seed with weight decay groks and none without, in the same budget"
    with_decay, without = val[wd > 0], val[wd == 0]
    missing = [
        name
        for name, rows in (("weight decay > 0", with_decay), ("weight decay 0", without))
        if rows.notna().sum() == 0
    ]
    if missing:
        return f"{claim}: {NOT_MEASURED} (no {' and no '.join(missing)} group measured)."
    ok = (with_decay.dropna() >= GROK_THRESHOLD).all() and (without.dropna() < GROK_THRESHOLD).all()
    return f"{claim}: {_verdict(bool(ok))}."


def _batch_lr(frames: Frames) -> list[str]:
    trials = frames["main"]
    keys = ["train.batch_size", "optim.lr"]
    to_val = _cells(trials, keys, "val/steps_to_threshold")
    to_train = _cells(trials, keys, "train/steps_to_100pct")
    reached = to_val["mean"].notna().all() and len(to_val) > 0

    # A trial that stops at its validation target may stop before every sampled training
    # problem is right: that is "not before it stopped", not "never". Grouped as _cells groups.
    reasons = trials.get("stopped_reason", pd.Series("", index=trials.index))
    present = [k for k in keys if k in trials.columns]
    at_target = trials.assign(_t=reasons.eq("target_reached")).groupby(present, dropna=False)
    at_target = at_target["_t"].all().reset_index()

    def steps(x: float, early: bool = False) -> str:
        if pd.isna(x):
            return "not before the validation target stopped it" if early else "never"
        return f"at {x:,.0f}"

    rows = "; ".join(
        f"batch {int(v['train.batch_size'])} (lr {v['optim.lr']:.2g}): threshold "
        f"{steps(v['mean'])}, 100 % train {steps(t['mean'], bool(e['_t']))}"
        for (_, v), (_, t), (_, e) in zip(
            to_val.iterrows(), to_train.iterrows(), at_target.iterrows(), strict=True
        )
    )
    falls = bool((to_val.sort_values("train.batch_size")["mean"].diff().dropna() <= 0).all())
    return [
        f"Steps: {rows}.",
        f"Every batch size reaches the threshold: {_verdict(bool(reached))}.",
        "Steps to the threshold fall as the batch grows (the seed's claim): "
        f"{'yes' if reached and falls else 'no'}.",
    ]


ARM_BARS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "abacus": (
        f"Abacus embeddings (the paper's) reach >= {_pct(LENGTH_BAR)} on longer operands",
        lambda v: v >= LENGTH_BAR,
    ),
    "abacus_bias": (
        f"The Abacus index as an attention bias (abacus_bias) reaches >= {_pct(LENGTH_BAR)} on "
        "longer operands",
        lambda v: v >= LENGTH_BAR,
    ),
    "learned": (
        f"Learned positions stay near 0 (< {_pct(LEARNED_CEILING)})",
        lambda v: v < LEARNED_CEILING,
    ),
}
"""The abacus_length arms and their bars, on the reported longer operands (``longer/``)."""


def _abacus(frames: Frames) -> list[str]:
    trials = frames["main"]
    arm = "model.position"
    reported = _cells(trials, [arm], "longer/exact_match")
    validated = _cells(trials, [arm], "longer_val/exact_match")
    longer = dict(zip(reported.get(arm, []), reported["mean"], strict=False))
    held = dict(zip(validated.get(arm, []), validated["mean"], strict=False))
    out = [
        f"{name}: {_pct(longer[name])} on longer operands (validation lengths {_pct(held[name])})."
        for name in longer
    ]
    for name, (claim, ok) in ARM_BARS.items():
        why = "" if name in longer else " (the arm did not run)"
        out.append(f"{claim}: {_bar(longer.get(name), ok)}{why}.")
    return [*out, _abacus_choice(trials, arm)]


def _abacus_choice(trials: pd.DataFrame, arm: str) -> str:
    """The best arm, chosen on the validation lengths (longer_val/) and reported on the others
    (longer/): abacus_bias's gain and reach were set on the validation lengths, so the reported
    lengths are ones no choice saw."""
    best = _chosen(trials, [arm], "longer/exact_match", on="longer_val/exact_match")
    if best is None or arm not in best:
        return (
            f"The best arm: {NOT_MEASURED} (no longer_val/exact_match): neither the arm nor "
            "abacus_bias's gain and reach could be chosen on longer lengths apart from the "
            "reported ones, so the longer figures above are not validated."
        )
    return (
        f"The best arm, chosen on validation lengths (longer_val/exact_match "
        f"{_pct(best['chosen'])}; abacus_bias's gain and reach were chosen on them too), is "
        f"{best[arm]}: {_pct(best['reported'])} on the reported longer lengths (longer/)."
    )


def _addition_k4(frames: Frames) -> list[str]:
    trials = frames["main"]
    formats = trials["format.name"] if "format.name" in trials else pd.Series("plain", trials.index)
    out = []
    for name, rows in trials.groupby(formats):
        test = _col(rows, "test/exact_match").mean()
        line = f"{name} answers: in-distribution test {_pct(test)}"
        if name == "plain":  # the seed's format carries the bar
            line += f" (bar >= 99 %: {_bar(test, lambda v: v >= 0.99)})"
        out.append(line + ".")
    ood = _col(trials, "ood/exact_match").mean()
    norm = _col(trials, "ood/normalised_match").mean()
    out.append(f"Spaced out-of-distribution prompts: exact {_pct(ood)}, normalised {_pct(norm)}.")
    chains = sorted(
        (c for c in trials.columns if c.startswith("carry/exact_match/carry_")),
        key=lambda c: int(c.rsplit("_", 1)[1]),
    )
    for name, rows in trials.groupby(formats):
        if chains:
            per = ", ".join(f"{c.rsplit('_', 1)[1]}: {_pct(_col(rows, c).mean())}" for c in chains)
            out.append(f"{name} answers on the carry set, by longest carry chain: {per}.")
    return out


def _multi_op(frames: Frames) -> list[str]:
    trials = frames["main"]
    ops = ["add", "sub", "mul", "floordiv", "mod"]
    out = []
    weights = trials["task.op_weights"].astype(str) if "task.op_weights" in trials else None
    groups = trials.groupby(weights) if weights is not None else [("all", trials)]
    measured = []
    for label, rows in groups:
        per = {op: _col(rows, f"test/exact_match/{op}").mean() for op in ops}
        text = ", ".join(f"{op} {_pct(v)}" for op, v in per.items())
        finite = [(v, op) for op, v in per.items() if np.isfinite(v)]
        hardest = min(finite)[1] if finite else "not measured"
        out.append(f"op weights {label}: {text}; hardest: {hardest}.")
        measured.append((label, per))
    if len(measured) == 2:  # the effect of the weighting, in points of exact match per operation
        (first, a), (second, b) = measured
        shifts = ", ".join(f"{op} {_points(b[op] - a[op])}" for op in ops)
        out.append(f"Weights {second} against {first}, in points: {shifts}.")
    return out


def _points(shift: float) -> str:
    return f"{100 * shift:+.1f}" if np.isfinite(shift) else "not measured"


def _optuna(frames: Frames) -> list[str]:
    main, grid = frames["main"], frames.get("optuna_lr_grid")
    if grid is None or grid.empty:
        return ["The lr grid to compare with has not run."]

    # a trial ASHA stopped has no end-of-trial summary (best/...): its last validation stands in
    def best(trials: pd.DataFrame) -> float:
        return _col(trials, "best/val/exact_match").fillna(_col(trials, "val/exact_match")).max()

    best_opt, best_grid = best(main), best(grid)
    steps_opt, steps_grid = _col(main, "steps").sum(), _col(grid, "steps").sum()
    close = _bar(best_opt - best_grid, lambda gap: gap >= -0.01)
    cheap = _bar(steps_opt / steps_grid if steps_grid else np.nan, lambda share: share <= 0.5)
    return [
        f"Optuna + ASHA: best {_pct(best_opt)} in {steps_opt:,.0f} training steps; lr grid: "
        f"best {_pct(best_grid)} in {steps_grid:,.0f} steps (both on validation).",
        f"Within 0.01 of the grid: {close}; at most half its steps: {cheap}.",
    ]


def _model_size(frames: Frames) -> list[str]:
    return _size_ladder(frames, 253_000, 0.376)


CLAIMS: dict[str, Claim] = {
    c.space: c
    for c in [
        Claim(
            "width_vs_depth",
            "002, phase 2",
            "3-digit addition in base-100 tokens with RoPE (theta 100): 512 wide x 2 deep 87.2 %, "
            "256 x 4 79.31 %, 128 x 8 71.8 %; a 253K-parameter model 37.6 %.",
            _width_vs_depth,
        ),
        Claim(
            "model_size",
            "002, phase 1",
            "Upper / middle / lower / tiny (3.18M / 1.4M / 253K / 77K parameters) reach 91.5 / "
            "79.31 / 37.6 / ~0 % exact match.",
            _model_size,
        ),
        Claim(
            "grokking",
            "003",
            "Division mod 97 on a 70/15/15 split groks with weight decay 1.0 after about 185k "
            "steps (95 % test); three seeds as mean ± std.",
            _grokking,
            plot="training_curves",  # the late jump of validation exact match is the finding
        ),
        Claim(
            "batch_lr",
            "003, batch-size ablation",
            "With lr = 1e-3 * sqrt(batch / 32), steps to 100 % train and steps to grok fall "
            "as the batch grows.",
            _batch_lr,
            plot="training_curves",
        ),
        Claim(
            "abacus_length",
            "001",
            "Abacus embeddings with reversed digits generalise to longer operands than trained "
            "(McLeish et al. 2024: up to 99 % at 100 digits after 20); the notebook's learned "
            "positions score 0 % on 21-30 digits.",
            _abacus,
            plot="exact_match_by_length",
        ),
        Claim(
            "addition_k4",
            "000",
            "A 4-layer 128-wide GPT learns 4-digit addition to high in-distribution exact match; "
            "spaced prompts are out of distribution and scored exact and normalised.",
            _addition_k4,
        ),
        Claim(
            "multi_op",
            "004",
            "One ~10M-parameter model learns + - * // % on 3-digit operands with carry traces, "
            "early-stopped at 99 %; operation weights favour the hard operations.",
            _multi_op,
        ),
        Claim(
            "optuna_lr",
            "none (a tool claim)",
            "Optuna's TPE with ASHA early stopping finds a learning rate as good as a grid "
            "for a fraction of its training steps.",
            _optuna,
            companions={
                "optuna_lr_grid": (
                    "sweep.name=optuna_lr_grid",
                    "sweep.search=grid",
                    "sweep.num_samples=1",
                    "sweep.scheduler={name: fifo}",
                    # quarter decades over the Optuna space's range
                    "space.optim.lr=[1.0e-4, 1.8e-4, 3.2e-4, 5.6e-4, 1.0e-3, 1.8e-3, 3.2e-3, "
                    "5.6e-3, 1.0e-2]",
                ),
            },
        ),
    ]
}

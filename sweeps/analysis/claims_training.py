"""The checks of the training questions: whether weight decay makes a run grok (seed 003),
which learning phase each learning rate and weight decay falls in (Liu et al. 2022), how batch
size and learning rate set the steps to a target (seed 003's ablation), and whether Optuna with
ASHA finds as good a learning rate as a grid for less training. The rules of every check are in
``sweeps.analysis.claims``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sweeps.analysis.claims_reading import (
    NOT_MEASURED,
    Frames,
    bar,
    column,
    pct,
    per_cell,
    verdict_of,
)
from sweeps.analysis.phases import (
    COMPREHENSION,
    CONFUSION,
    GROKKING,
    MEMORISATION,
    PHASE_COLUMN,
    PHASES,
    majority_phase,
)

GROK_THRESHOLD = 0.95
"""Seed 003 counts a run as grokked at 95 % exact match."""


def grokking(frames: Frames) -> list[str]:
    trials = frames["main"]
    val = column(trials, "val/exact_match")
    wd = column(trials, "optim.weight_decay")
    steps = column(trials, "val/steps_to_threshold")
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
            f"(final validation {pct(val[rows].mean())} ± {pct(val[rows].std())}){when}."
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
    return f"{claim}: {verdict_of(bool(ok))}."


GROKFAST_SPEEDUP = 5.0
"""The bar of the Grokfast check, fixed before any run (the findings issue): at least 5x fewer
steps to 95 % validation with the filter than without (Lee et al. report about 50x)."""


GROKFAST_PAPER_SWEEP = "grokfast_paper"
"""The companion sweep: Grokfast's own setting (multiplication mod 97 on a 50 % split, two
layers, weight decay 0.005, no gradient clipping, as the paper's code trains)."""


def grokfast(frames: Frames) -> list[str]:
    """The filter against none in the space's setting, then in the paper's own (the companion
    sweep), when it ran."""
    out = _grokfast_arms(frames["main"])
    paper = frames.get(GROKFAST_PAPER_SWEEP)
    where = f"In Grokfast's own setting (the companion sweep {GROKFAST_PAPER_SWEEP})"
    if paper is None or paper.empty:
        return [*out, f"{where}: **not run**."]
    return [*out, *(f"{where}, {line[0].lower()}{line[1:]}" for line in _grokfast_arms(paper))]


def _grokfast_arms(trials: pd.DataFrame) -> list[str]:
    """Steps to 95 % validation with and without the gradient filter (``optim.grad_filter``),
    mean ± std over seeds, and their ratio against GROKFAST_SPEEDUP. A seed that never reached
    95 % counts at its last step, so an arm's mean is then a lower bound (said so)."""
    arm = trials.get("optim.grad_filter", pd.Series(np.nan, index=trials.index))
    val = column(trials, "val/exact_match")
    steps = column(trials, "val/steps_to_threshold")
    last = column(trials, "steps")
    out, means, complete = [], {}, {}
    for name in ("none", "ema"):
        rows = arm == name
        if not rows.any():
            out.append(f"grad_filter {name}: {NOT_MEASURED}.")
            continue
        reached = steps[rows].notna()
        counted = steps[rows].fillna(last[rows])
        means[name], complete[name] = counted.mean(), bool(reached.all())
        bound = "" if reached.all() else " (a lower bound: not every seed reached it)"
        spread = f" ± {counted.std(ddof=1):,.0f}" if len(counted) > 1 else ""
        out.append(
            f"grad_filter {name}: {int(reached.sum())} of {int(rows.sum())} seeds reach 95 % "
            f"validation, at step {counted.mean():,.0f}{spread}{bound}; final validation "
            f"{pct(val[rows].mean())}."
        )
    claim = f"At least {GROKFAST_SPEEDUP:g}x fewer steps to 95 % validation with the filter"
    if len(means) < 2 or not np.isfinite(means["none"]) or not means["ema"] > 0:
        return [*out, f"{claim}: {NOT_MEASURED}."]
    if not complete["ema"]:
        verdict = f"{claim}: {verdict_of(False)} (not every seed grokked with the filter)."
        return [*out, verdict, *_grokfast_why(arm, trials)]
    ratio = means["none"] / means["ema"]
    at_least = "" if complete["none"] else "at least "  # the baseline's seeds cut by the budget
    verdict = f"{claim}: {verdict_of(ratio >= GROKFAST_SPEEDUP)} ({at_least}{ratio:.1f}x)."
    return [*out, verdict, *_grokfast_why(arm, trials)]


def _grokfast_why(arm: pd.Series, trials: pd.DataFrame) -> list[str]:
    """Why, measured: the plateau without the filter between getting every training pair right
    (``train/steps_to_100pct``) and 95 % validation, which is what Grokfast shortens; and
    whether the filter got the training pairs right as soon as none did."""
    fit = column(trials, "train/steps_to_100pct")
    to_val = column(trials, "val/steps_to_threshold")
    none, ema = arm == "none", arm == "ema"
    fit_none, fit_ema = fit[none].dropna(), fit[ema].dropna()
    if fit_none.empty:
        return []
    out = []
    plateau = (to_val[none] - fit[none]).dropna()
    if len(plateau):
        short = plateau.mean() < 0.5 * fit_none.mean()
        amount = "little " if short else "a "
        out.append(
            f"Why, measured: without the filter 95 % validation came {plateau.mean():,.0f} steps "
            f"after every training pair was right (step {fit_none.mean():,.0f}, mean over "
            f"{len(plateau)} seeds): {amount}plateau for the filter to shorten."
        )
    slower = len(fit_ema) < len(fit_none) or fit_ema.mean() > fit_none.mean()
    at = f" (step {fit_ema.mean():,.0f})" if len(fit_ema) else ""
    out.append(
        f"With the filter {len(fit_ema)} of {int(ema.sum())} seeds got every training pair "
        f"right{at}, against {len(fit_none)} of {int(none.sum())} without: the filter "
        f"{'slowed fitting itself' if slower else 'did not slow fitting'}."
    )
    return out


LR, WD = "optim.lr", "optim.weight_decay"
GOLDILOCKS_RANK = {MEMORISATION: 0, COMPREHENSION: 1, GROKKING: 1, CONFUSION: 2}
"""Liu et al.'s order of the phases as weight decay grows at one learning rate: memorisation,
then the two that generalise (their "Goldilocks zone"), then confusion."""


def grokking_phases(frames: Frames) -> list[str]:
    """The phase of every grid point (the majority over its seeds), by weight decay; whether
    all four of Liu et al.'s phases appear, and whether weight decay orders them as theirs."""
    trials = frames["main"]
    if PHASE_COLUMN not in trials.columns or trials[PHASE_COLUMN].isna().all():
        return [f"Phases: {NOT_MEASURED} (no trial has a training exact match curve)."]
    cells = _phase_cells(trials)
    rows = [
        f"weight decay {decay:g}: " + ", ".join(group["label"])
        for decay, group in cells.groupby(WD)
    ]
    found = cells["phase"].tolist()
    ordered = sum(_in_goldilocks_order(group) for _, group in cells.groupby(LR))
    n_rates = cells[LR].nunique()
    return [
        f"Phase per grid point (the majority over its seeds): {'; '.join(rows)}.",
        f"Grid points by phase: {', '.join(f'{p} {found.count(p)}' for p in PHASES)}.",
        f"All four phases appear: {verdict_of(all(p in found for p in PHASES))}.",
        "At every learning rate, growing weight decay goes from memorisation through the phases "
        f"that generalise to confusion (Liu et al.'s Goldilocks zone): "
        f"{verdict_of(ordered == n_rates)} ({ordered} of {n_rates} learning rates).",
    ]


def _phase_cells(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (weight decay, learning rate): its majority phase, and a label with the
    learning rate and ``k/n`` where the point's seeds disagree."""
    records = []
    for (decay, rate), cell in trials.groupby([WD, LR]):
        phase, count = majority_phase(cell[PHASE_COLUMN])
        n = int(cell[PHASE_COLUMN].notna().sum())
        label = f"lr {rate:g} {phase}" + (f" ({count}/{n})" if count < n else "")
        records.append({WD: decay, LR: rate, "phase": phase, "label": label})
    return pd.DataFrame(records)


def _in_goldilocks_order(cells: pd.DataFrame) -> bool:
    """Whether one learning rate's phases, by growing weight decay, never go back down
    ``GOLDILOCKS_RANK`` (a phase that is absent breaks nothing)."""
    phases = cells.sort_values(WD)["phase"]
    ranks = [GOLDILOCKS_RANK[p] for p in phases if p in GOLDILOCKS_RANK]
    return ranks == sorted(ranks)


def batch_lr(frames: Frames) -> list[str]:
    trials = frames["main"]
    keys = ["train.batch_size", "optim.lr"]
    to_val = per_cell(trials, keys, "val/steps_to_threshold")
    to_train = per_cell(trials, keys, "train/steps_to_100pct")
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
        f"Every batch size reaches the threshold: {verdict_of(bool(reached))}.",
        "Steps to the threshold fall as the batch grows (the seed's claim): "
        f"{'yes' if reached and falls else 'no'}.",
    ]


def optuna_lr(frames: Frames) -> list[str]:
    main, grid = frames["main"], frames.get("optuna_lr_grid")
    if grid is None or grid.empty:
        return ["The lr grid to compare with has not run."]

    # a trial ASHA stopped has no end-of-trial summary (best/...): its last validation stands in
    def best(trials: pd.DataFrame) -> float:
        return (
            column(trials, "best/val/exact_match").fillna(column(trials, "val/exact_match")).max()
        )

    best_opt, best_grid = best(main), best(grid)
    steps_opt, steps_grid = column(main, "steps").sum(), column(grid, "steps").sum()
    close = bar(best_opt - best_grid, lambda gap: gap >= -0.01)
    cheap = bar(steps_opt / steps_grid if steps_grid else np.nan, lambda share: share <= 0.5)
    return [
        f"Optuna + ASHA: best {pct(best_opt)} in {steps_opt:,.0f} training steps; lr grid: "
        f"best {pct(best_grid)} in {steps_grid:,.0f} steps (both on validation).",
        f"Within 0.01 of the grid: {close}; at most half its steps: {cheap}.",
    ]

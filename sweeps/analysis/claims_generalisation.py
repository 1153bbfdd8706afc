"""The checks of the generalisation questions: operands longer than trained, by position
scheme (seed 001, ``abacus_length``), prompts spaced out of distribution, long carry chains and
carry cascades (seed 000, ``addition_k4``), and five operations in one model (seed 004,
``multi_op``). The rules of every check are in ``sweeps.analysis.claims``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from arith.data.length_grid import RATIO_KEY, SUCCESS
from arith.data.length_probe import BROKE_KEY as PROBE_BROKE
from arith.data.length_probe import EDGE_RATIO_KEY as PROBE_EDGE_RATIO
from arith.data.length_probe import RATIO_KEY as PROBE_RATIO
from sweeps.analysis.claims_reading import (
    NOT_MEASURED,
    Frames,
    bar,
    chosen_cell,
    column,
    is_measured,
    pct,
    per_cell,
    points,
    verdict_of,
)

LENGTH_BAR = 0.9
"""The findings issue's bar for an Abacus arm on longer operands (McLeish et al. 2024 report up
to 99 % at five times the trained length)."""
SEEDS_BAR = 3
"""The length issue's bar for the best arm: >= 99 % on the reported lengths on each of at least
this many seeds (Zhou et al. 2024: a mean over seeds hides a recipe that works for some)."""
LEARNED_CEILING = 0.05
"""Seed 001's notebook: learned positions score 0 % on longer operands; "near 0" is under 5 %."""


ARM_BARS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "abacus": (
        f"Abacus embeddings (the paper's) reach >= {pct(LENGTH_BAR)} on longer operands",
        lambda v: v >= LENGTH_BAR,
    ),
    "abacus_bias": (
        f"The Abacus index as an attention bias (abacus_bias) reaches >= {pct(LENGTH_BAR)} on "
        "longer operands",
        lambda v: v >= LENGTH_BAR,
    ),
    "learned": (
        f"Learned positions stay near 0 (< {pct(LEARNED_CEILING)})",
        lambda v: v < LEARNED_CEILING,
    ),
}
"""The abacus_length arms and their bars, on the reported longer operands (``longer/``)."""
ARM = "arm"
"""An abacus_length arm: the position scheme, ``_window`` where abacus_bias reads only the keys
within its reach (``model.abacus_bias_window``), ``_values`` where it also reads a value vector
per index difference (``model.abacus_bias_values``)."""


def arm_names(trials: pd.DataFrame) -> pd.Series:
    arm = trials["model.position"].astype(str)
    for option, suffix in (("window", "_window"), ("values", "_values")):
        if f"model.abacus_bias_{option}" in trials:
            on = trials[f"model.abacus_bias_{option}"].astype(str).str.lower() == "true"
            arm = arm.where(~on, arm + suffix)
    return arm


def abacus_length(frames: Frames) -> list[str]:
    trials = frames["main"]
    arm = ARM
    if "model.position" in trials:
        trials = trials.assign(**{ARM: arm_names(trials)})
    reported = per_cell(trials, [arm], "longer/exact_match")
    validated = per_cell(trials, [arm], "longer_val/exact_match")
    longer = dict(zip(reported.get(arm, []), reported["mean"], strict=False))
    held = dict(zip(validated.get(arm, []), validated["mean"], strict=False))
    out = [
        f"{name}: {pct(longer[name])} on longer operands (validation lengths {pct(held[name])})."
        for name in longer
    ]
    # each bar holds for every arm of its position scheme (abacus_bias_window_values is one)
    scheme = dict(zip(trials[arm], trials["model.position"], strict=True)) if arm in trials else {}
    for name, (claim, ok) in ARM_BARS.items():
        arms = [a for a in longer if scheme.get(a, a) == name]
        if not arms:
            out.append(f"{claim}: {bar(None, ok)} (the arm did not run).")
        for each in arms:
            which = "" if each == name else f" ({each})"
            out.append(f"{claim}{which}: {bar(longer[each], ok)}.")
    return [*out, *_across_seeds(trials, arm), _abacus_choice(trials, arm), *_probe(trials, arm)]


PROBE_RATIO_BAR = 10
"""The length issue's target for an arm with global attention: >= 99 % at 10x the trained
length on each of three seeds (the best published zero-shot ratio is about 6.67)."""


def _probe(trials: pd.DataFrame, arm: str) -> list[str]:
    """Per arm, how far the length probe climbed (arith.evaluation.length_probe) per seed, and
    whether the arm sees only keys within its reach (a locality prior: each position's task is
    the same at every length) or every key (global attention, as Abacus and position coupling);
    the 10x target is judged on the best global arm, chosen on the validation lengths."""
    if arm not in trials or not is_measured(trials, PROBE_RATIO):
        return []
    out = []
    for name, rows in trials.groupby(arm):
        ratios = column(rows, PROBE_RATIO).dropna()
        broke = column(rows, PROBE_BROKE).reindex(ratios.index)
        edges = column(rows, PROBE_EDGE_RATIO).reindex(ratios.index)
        kind = "locality prior (keys within its reach)" if _is_local(name) else "global attention"
        where = ", ".join(
            f"{r:g} (broke at {int(b)} digits)" if b > 0 else f"{r:g} (held to the probe's end)"
            for r, b in zip(ratios, broke.fillna(0), strict=True)
        )
        out.append(
            f"Length probe, {name} ({kind}): extrapolation ratio per seed {where}; carry edge "
            f"cases right up to {' / '.join(f'{e:g}' for e in edges.fillna(0))}x."
        )
    global_arms = trials[~trials[arm].map(_is_local)]
    best = chosen_cell(global_arms, [arm], PROBE_RATIO, on="longer_val/exact_match")
    claim = (
        f"An arm with global attention holds >= {pct(SUCCESS)} at {PROBE_RATIO_BAR}x the trained "
        f"length on each of at least {SEEDS_BAR} seeds"
    )
    if best is None or arm not in best:
        return [*out, f"{claim}: {NOT_MEASURED} (no global arm measured)."]
    ratios = column(global_arms[global_arms[arm] == best[arm]], PROBE_RATIO).dropna()
    ok = bar(ratios.min(), lambda v: v >= PROBE_RATIO_BAR and len(ratios) >= SEEDS_BAR)
    per_seed = " / ".join(f"{r:g}" for r in ratios)
    return [*out, f"{claim}: {ok} (the best, {best[arm]}, chosen on validation: {per_seed})."]


def _is_local(arm_name: str) -> bool:
    return "_window" in str(arm_name)


def _across_seeds(trials: pd.DataFrame, arm: str) -> list[str]:
    """Per arm, the seeds that solve the reported longer lengths (>= 99 %: a mean over seeds
    hides a recipe that works for some seeds only, Zhou et al. 2024), and the length grid's
    extrapolation ratio per seed where the trials measured one (arith.data.length_grid)."""
    if arm not in trials or not is_measured(trials, "longer/exact_match"):
        return []
    parts, ratios = [], []
    for name, rows in trials.groupby(arm):
        scores = column(rows, "longer/exact_match").dropna()
        parts.append(f"{name} {int((scores >= SUCCESS).sum())} of {len(scores)}")
        ratio = column(rows, RATIO_KEY).dropna()
        if len(ratio):
            ratios.append(f"{name} " + " / ".join(f"{r:g}" for r in ratio))
    out = [f"Seeds reaching >= {pct(SUCCESS)} on the reported longer lengths: {', '.join(parts)}."]
    if ratios:
        out.append(
            f"Extrapolation ratio (longest length up to which every length scores >= "
            f"{pct(SUCCESS)}, over the trained length), per seed: {'; '.join(ratios)}."
        )
    return out


def _abacus_choice(trials: pd.DataFrame, arm: str) -> str:
    """The best arm, chosen on the validation lengths (longer_val/) and reported on the others
    (longer/): abacus_bias's gain and reach were set on the validation lengths, so the reported
    lengths are ones no choice saw."""
    best = chosen_cell(trials, [arm], "longer/exact_match", on="longer_val/exact_match")
    if best is None or arm not in best:
        return (
            f"The best arm: {NOT_MEASURED} (no longer_val/exact_match): neither the arm nor "
            "abacus_bias's gain and reach could be chosen on longer lengths apart from the "
            "reported ones, so the longer figures above are not validated."
        )
    scores = column(trials[trials[arm] == best[arm]], "longer/exact_match").dropna()
    every_seed = bar(scores.min(), lambda v: v >= SUCCESS and len(scores) >= SEEDS_BAR)
    return (
        f"The best arm, chosen on validation lengths (longer_val/exact_match "
        f"{pct(best['chosen'])}; abacus_bias's reach, window and values were chosen on them too), "
        f"is {best[arm]}: {pct(best['reported'])} on the reported longer lengths (longer/); "
        f">= {pct(SUCCESS)} there on every one of at least {SEEDS_BAR} seeds: {every_seed} "
        f"({int((scores >= SUCCESS).sum())} of {len(scores)})."
    )


def addition_k4(frames: Frames) -> list[str]:
    trials = frames["main"]
    formats = trials["format.name"] if "format.name" in trials else pd.Series("plain", trials.index)
    out = []
    for name, rows in trials.groupby(formats):
        test = column(rows, "test/exact_match").mean()
        line = f"{name} answers: in-distribution test {pct(test)}"
        if name == "plain":  # the seed's format carries the bar
            line += f" (bar >= 99 %: {bar(test, lambda v: v >= 0.99)})"
        out.append(line + ".")
    ood = column(trials, "ood/exact_match").mean()
    norm = column(trials, "ood/normalised_match").mean()
    out.append(f"Spaced out-of-distribution prompts: exact {pct(ood)}, normalised {pct(norm)}.")
    chains = sorted(
        (c for c in trials.columns if c.startswith("carry/exact_match/carry_")),
        key=lambda c: int(c.rsplit("_", 1)[1]),
    )
    for name, rows in trials.groupby(formats):
        if chains:
            per = ", ".join(f"{c.rsplit('_', 1)[1]}: {pct(column(rows, c).mean())}" for c in chains)
            out.append(f"{name} answers on the carry set, by longest carry chain: {per}.")
        if "cascade/exact_match" in rows:  # chain length alone hides these (arith.problems.carries)
            cascade = column(rows, "cascade/exact_match").mean()
            out.append(
                f"{name} answers on the cascade set (a carry from the ones digit through the "
                f"top, 1166 + 9834 = 11000): {pct(cascade)}."
            )
    return out


MULTI_OPS = ["add", "sub", "mul", "floordiv", "mod"]
# Seed 004's goal for one model, fixed before any run: >= 99 % on each of these.
ONE_MODEL_OPS, ONE_MODEL_BAR = ["add", "sub", "floordiv", "mod"], 0.99
EMERGED = 0.5  # an operation "emerges" at the smallest size whose mean reaches this


MUL_TRACE_SWEEP = "multi_op_mul"
"""The companion sweep: the ladder's top with ``format.mul_trace`` and 8000 steps."""


def multi_op(frames: Frames) -> list[str]:
    trials = frames["main"]
    if "n_params" in trials and trials["n_params"].nunique() > 1:
        return _size_ladder(trials) + _one_model(trials) + _with_mul_trace(frames)
    return _op_weights(trials)


def _size_ladder(trials: pd.DataFrame) -> list[str]:
    """Each operation's test exact match per model size, and where * emerges."""
    sizes = trials.groupby("n_params")
    out = []
    for n_params, rows in sizes:
        per = ", ".join(f"{op} {pct(column(rows, f'test/exact_match/{op}').mean())}"
                        for op in MULTI_OPS)  # fmt: skip
        out.append(f"{int(n_params):,} parameters: {per}.")
    mul = sizes.apply(lambda rows: column(rows, "test/exact_match/mul").mean())
    emerged = mul[mul >= EMERGED]
    if len(emerged):
        out.append(f"* reaches {pct(EMERGED)} first at {int(emerged.index[0]):,} parameters.")
    else:
        largest = int(mul.index.max())
        out.append(f"* stays below {pct(EMERGED)} up to {largest:,} parameters (the ladder's top).")
    return out


def _best_on_validation(trials: pd.DataFrame) -> tuple[pd.Series, dict[str, float]] | None:
    """The trial with the best val/exact_match and its test exact match per operation; None
    where no trial has a validation figure."""
    val = column(trials, "val/exact_match")
    if not val.notna().any():
        return None
    best = trials.loc[val.idxmax()]
    per = {op: column(trials.loc[[best.name]], f"test/exact_match/{op}").iloc[0]
           for op in MULTI_OPS}  # fmt: skip
    return best, per


def _clears(per: dict[str, float], ops: list[str]) -> bool:
    return all(np.isfinite(per[op]) and per[op] >= ONE_MODEL_BAR for op in ops)


def _one_model(trials: pd.DataFrame) -> list[str]:
    """The best trial, chosen on validation, against seed 004's bar on + - // %, then with *
    too (issue 33's bar: one model for all five)."""
    chosen = _best_on_validation(trials)
    if chosen is None:
        return ["One model >= 99 % on + - // %: **not measured** (no val/exact_match)."]
    best, per = chosen
    text = ", ".join(f"{op} {pct(per[op])}" for op in ONE_MODEL_OPS)
    return [
        f"The best trial on validation ({int(best['n_params']):,} parameters): {text}; "
        f"each of + - // % >= {pct(ONE_MODEL_BAR)}: {verdict_of(_clears(per, ONE_MODEL_OPS))}. "
        f"With * ({pct(per['mul'])}), all five >= {pct(ONE_MODEL_BAR)}: "
        f"{verdict_of(_clears(per, MULTI_OPS))}."
    ]


def _with_mul_trace(frames: Frames) -> list[str]:
    """The companion's one model against the all-five bar: what * takes, when it was run."""
    trials = frames.get(MUL_TRACE_SWEEP)
    if trials is None or trials.empty:
        return [f"With format.mul_trace (the companion sweep {MUL_TRACE_SWEEP}): **not run**."]
    chosen = _best_on_validation(trials)
    if chosen is None:
        return [f"With format.mul_trace ({MUL_TRACE_SWEEP}): **not measured** (no validation)."]
    best, per = chosen
    row = trials.loc[[best.name]]
    text = ", ".join(f"{op} {pct(v)}" for op, v in per.items())
    cost = f"{int(column(row, 'steps').iloc[0]):,} steps"
    if "wall_time_s" in row:
        cost += f", {column(row, 'wall_time_s').iloc[0]:.0f} s of training"
    return [
        f"With format.mul_trace ({MUL_TRACE_SWEEP}, {int(best['n_params']):,} parameters, "
        f"{cost}): {text}; all five >= {pct(ONE_MODEL_BAR)}: {verdict_of(_clears(per, MULTI_OPS))}."
    ]


def _op_weights(trials: pd.DataFrame) -> list[str]:
    ops = MULTI_OPS
    out = []
    weights = trials["task.op_weights"].astype(str) if "task.op_weights" in trials else None
    groups = trials.groupby(weights) if weights is not None else [("all", trials)]
    measured = []
    for label, rows in groups:
        per = {op: column(rows, f"test/exact_match/{op}").mean() for op in ops}
        text = ", ".join(f"{op} {pct(v)}" for op, v in per.items())
        finite = [(v, op) for op, v in per.items() if np.isfinite(v)]
        hardest = min(finite)[1] if finite else "not measured"
        out.append(f"op weights {label}: {text}; hardest: {hardest}.")
        measured.append((label, per))
    if len(measured) == 2:  # the effect of the weighting, in points of exact match per operation
        (first, a), (second, b) = measured
        shifts = ", ".join(f"{op} {points(b[op] - a[op])}" for op in ops)
        out.append(f"Weights {second} against {first}, in points: {shifts}.")
    return out

"""How close a finished sweep came to the machine's FLOP bound: each trial's model FLOP/s against
the measured peak of one core in its precision (MFU), and the whole sweep's wall time against
the time its training FLOPs would take at that peak on every core (the FLOP bound).

Pure arithmetic on a sweep's trials (``trials.csv``): the peaks are measured by the caller
(``python -m sweeps.bench --flagship``), so the figures here can be checked by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class SweepBound:
    """A sweep's training FLOPs, the seconds they need at the peak on ``n_cores`` cores, the
    seconds the sweep took, and the fraction of the bound reached (bound / wall)."""

    flops: float
    n_cores: int
    bound_s: float
    wall_s: float

    @property
    def fraction(self) -> float:
        return self.bound_s / self.wall_s


def trial_precision(trials: pd.DataFrame) -> pd.Series:
    """Each trial's precision as it trained: its ``hardware.precision`` record, else (runs from
    before the record) ``train.precision`` with ``auto`` as fp32."""
    asked = trials.get("train.precision", pd.Series("fp32", index=trials.index))
    asked = asked.fillna("fp32").replace({"auto": "fp32"})
    recorded = trials.get("hardware.precision")
    return asked if recorded is None else recorded.fillna(asked)


def trial_mfu(trials: pd.DataFrame, peaks: dict[str, float]) -> pd.DataFrame:
    """Per trial: FLOPs, training seconds, model FLOP/s and MFU against one core's peak of its
    precision (a trial holds one CPU). ``peaks``: FLOP/s of one core, by precision."""
    precision = trial_precision(trials)
    seconds = trials["time/elapsed_s"]
    achieved = trials["flops"] / seconds
    return pd.DataFrame(
        {
            "trial_id": trials["trial_id"],
            "precision": precision,
            "n_params": trials["n_params"],
            "flops": trials["flops"],
            "train_s": seconds,
            "gflops_per_s": achieved / 1e9,
            "mfu_pct": 100 * achieved / precision.map(peaks),
        }
    )


def sweep_bound(
    trials: pd.DataFrame, peaks: dict[str, float], n_cores: int, wall_s: float
) -> SweepBound:
    """The FLOP bound of the whole sweep: every trial's FLOPs at one core's peak of its
    precision, spread perfectly over ``n_cores`` cores, against the measured ``wall_s``."""
    core_seconds = (trials["flops"] / trial_precision(trials).map(peaks)).sum()
    return SweepBound(float(trials["flops"].sum()), n_cores, core_seconds / n_cores, wall_s)


def render_bound(per_trial: pd.DataFrame, bound: SweepBound, peaks: dict[str, float]) -> str:
    """The figures as markdown: the peaks, one row per trial, and the sweep's fraction."""
    lines = [
        "peak of one core (best square torch.mm, 1 thread): "
        + ", ".join(f"{name} {value / 1e9:.1f} GFLOP/s" for name, value in peaks.items()),
        "",
        "| trial | precision | params | GFLOP | train s | GFLOP/s | MFU % |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in per_trial.itertuples(index=False):
        lines.append(
            f"| {row.trial_id} | {row.precision} | {row.n_params:,.0f} | {row.flops / 1e9:,.0f} "
            f"| {row.train_s:.1f} | {row.gflops_per_s:.1f} | {row.mfu_pct:.1f} |"
        )
    lines += [
        "",
        f"training FLOPs {bound.flops / 1e12:.2f} TFLOP; FLOP bound on {bound.n_cores} cores "
        f"{bound.bound_s:.0f} s; sweep wall {bound.wall_s:.0f} s; "
        f"fraction of the bound reached {100 * bound.fraction:.0f} %",
    ]
    return "\n".join(lines)

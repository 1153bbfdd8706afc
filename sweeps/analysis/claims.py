"""What each shipped search space exists to show, the seed's claim, and the check of a run.

The checks live by research question: ``claims_scaling`` (model size, width against depth),
``claims_training`` (grokking, batch size and learning rate, the learning-rate search) and
``claims_generalisation`` (longer operands, spaced prompts and carries, several operations),
all reading the trials through ``claims_reading``. A check reads the measured trials
(``trials.csv`` columns: dotted config paths, metrics, ``n_params``, ``steps``, ``status``)
and returns sentences, each saying whether a bar of the findings issue was met. Every figure
in a sentence comes from the trials, none is typed here; the seed claims are quoted from the
seed documents (``shared/seeds``).

Honest numbers: every bar of a check is fixed before a run, from the seed or the findings issue,
never from what a run measured; every "best" (cell, shape, arm) is chosen on a validation set
(``val/exact_match``, mean over seeds per cell; ``longer_val/`` for length) and reported on a
held-out one (``test/``, ``longer/``); a bar whose data is absent reads "not measured".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sweeps.analysis import claims_generalisation, claims_scaling, claims_training
from sweeps.analysis.claims_reading import Frames


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


CLAIMS: dict[str, Claim] = {
    c.space: c
    for c in [
        Claim(
            "width_vs_depth",
            "002, phase 2",
            "3-digit addition in base-100 tokens with RoPE (theta 100): 512 wide x 2 deep 87.2 %, "
            "256 x 4 79.31 %, 128 x 8 71.8 %; a 253K-parameter model 37.6 %.",
            claims_scaling.width_vs_depth,
        ),
        Claim(
            "model_size",
            "002, phase 1",
            "Upper / middle / lower / tiny (3.18M / 1.4M / 253K / 77K parameters) reach 91.5 / "
            "79.31 / 37.6 / ~0 % exact match.",
            claims_scaling.model_size,
        ),
        Claim(
            "grokking",
            "003",
            "Division mod 97 on a 70/15/15 split groks with weight decay 1.0 after about 185k "
            "steps (95 % test); three seeds as mean ± std.",
            claims_training.grokking,
            plot="training_curves",  # the late jump of validation exact match is the finding
        ),
        Claim(
            "grokfast",
            "003, after Lee et al. 2024 (Grokfast)",
            "Amplifying the slow part of the gradients (an exponential moving average, alpha "
            "0.98, added lamb = 2 times) makes modular arithmetic grok about 50x sooner.",
            claims_training.grokfast,
            plot="training_curves",
            companions={
                # the paper's own setting, where its code does not clip; 2000 steps are 5x the
                # 400 at which the unfiltered arm reached 95 % there (one seed, before the run)
                claims_training.GROKFAST_PAPER_SWEEP: (
                    f"sweep.name={claims_training.GROKFAST_PAPER_SWEEP}",
                    "base.task.operation=mul",
                    "base.data.val_fraction=0.25",
                    "base.data.test_fraction=0.25",
                    "base.model.n_layer=2",
                    "base.optim.weight_decay=0.005",
                    "base.optim.grad_clip=null",
                    "base.train.max_steps=2000",
                ),
            },
        ),
        Claim(
            "grokking_phases",
            "003, after Liu et al. 2022",
            "Over learning rate and weight decay, a transformer on modular arithmetic learns in "
            "four phases: comprehension, grokking, memorisation and confusion; it generalises "
            "(comprehension, grokking) only between memorisation and confusion.",
            claims_training.grokking_phases,
            plot="phase_map",
        ),
        Claim(
            "batch_lr",
            "003, batch-size ablation",
            "With lr = 1e-3 * sqrt(batch / 32), steps to 100 % train and steps to grok fall "
            "as the batch grows.",
            claims_training.batch_lr,
            plot="training_curves",
        ),
        Claim(
            "abacus_length",
            "001",
            "Abacus embeddings with reversed digits generalise to longer operands than trained "
            "(McLeish et al. 2024: up to 99 % at 100 digits after 20); the notebook's learned "
            "positions score 0 % on 21-30 digits.",
            claims_generalisation.abacus_length,
            plot="length_heatmap",
        ),
        Claim(
            "addition_k4",
            "000",
            "A 4-layer 128-wide GPT learns 4-digit addition to high in-distribution exact match; "
            "spaced prompts are out of distribution and scored exact and normalised.",
            claims_generalisation.addition_k4,
        ),
        Claim(
            "multi_op",
            "004",
            "One ~10M-parameter model learns + - * // % on 3-digit operands with carry traces, "
            "early-stopped at 99 %; * is the hardest and needs the most parameters.",
            claims_generalisation.multi_op,
            plot="exact_match_by_op",  # each operation along the size ladder: where * emerges
            companions={
                # what * takes in the same one model: the trace, and time past the space's
                # 10 min; stopped once the worst operation reaches the space's 99 % on
                # validation (2026-11-30, on the weights' average: step 2,500, 896 s)
                claims_generalisation.MUL_TRACE_SWEEP: (
                    f"sweep.name={claims_generalisation.MUL_TRACE_SWEEP}",
                    "base.format.mul_trace=true",
                    "base.train.batch_size=128",
                    "base.optim.warmup_steps=100",
                    "base.optim.decay_steps=4400",
                    "base.train.eval_every=500",
                    "base.train.min_steps=500",
                    "base.train.max_steps=5000",
                    "base.train.monitor=val/exact_match/worst_op",
                    "space.model.d_model=[128]",
                ),
            },
        ),
        Claim(
            "optuna_lr",
            "none (a tool claim)",
            "Optuna's TPE with ASHA early stopping finds a learning rate as good as a grid "
            "for a fraction of its training steps.",
            claims_training.optuna_lr,
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

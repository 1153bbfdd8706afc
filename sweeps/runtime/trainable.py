"""The function trainable: a trial's flat Tune config -> arith RunConfig ->
``arith.training.trainer.train``.

Each evaluation is reported to Tune with the checkpoint train() wrote just before it, so a
failed trial (or a resumed sweep) continues from its last report. After train() returns, one
more report carries the summary (``stopped_reason``, sizes, steps-to-threshold), which the
driver-side MLflow callback records. The trial knows nothing of MLflow or tracking URIs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeps.runtime.scratch import PACK_SCRATCH, TRIAL_SCRATCH, working_folder
from sweeps.spec.identity import POINT_KEY
from sweeps.spec.packing import PACK_KEY, Member
from sweeps.spec.space import Derived, resolve_run_config
from sweeps.tracking.summary import RAY_KEY

# train() marks its last report "done": 1, which Tune would take as "stop this trial now",
# before the summary report; the checkpoint path is not a metric.
_NOT_REPORTED = ("done", "checkpoint")


def reportable(metrics: dict[str, Any]) -> dict[str, Any]:
    """Numeric values only (no None, no strings), without the keys Tune would misread."""
    return {
        k: v
        for k, v in metrics.items()
        if k not in _NOT_REPORTED and isinstance(v, int | float) and not isinstance(v, bool)
    }


def summary_report(summary: dict[str, Any], ray_version: str | None = None) -> dict[str, Any]:
    """The last report: numeric summary values plus ``stopped_reason`` (the callback's marker),
    ``final_weights`` and the ``hardware.*`` strings, with Ray's version where given (the
    callback logs them as params)."""
    out = reportable(summary)
    out["stopped_reason"] = str(summary.get("stopped_reason", "max_steps"))
    out["final_weights"] = str(summary.get("final_weights", "last"))
    out.update({k: str(v) for k, v in summary.items() if k.startswith("hardware.")})
    if ray_version is not None:
        out[RAY_KEY] = ray_version
    return out


def train_trial(
    config: dict[str, Any],
    base: dict[str, Any],
    derived: dict[str, Derived],
    checkpoint_every_s: float = 0.0,
) -> None:
    """Tune's function trainable (bind ``base``, ``derived`` and ``checkpoint_every_s`` with
    ``tune.with_parameters``). A report carries train()'s checkpoint when ``checkpoint_every_s``
    have passed since the last one that did, and always the last report: each checkpoint Tune
    keeps costs a copy into storage and bookkeeping on the driver, while a restored trial redoes
    at most that many seconds."""
    import time

    import ray
    from ray import tune

    from arith.training.trainer import train
    from sweeps.runtime.placement import check_granted_gpu

    check_granted_gpu()  # a GPU granted that torch cannot see: one line, not a CPU trial
    run_config = resolve_run_config(base, config, derived)
    with working_folder(TRIAL_SCRATCH) as tmp:
        resume_from = None
        restored = tune.get_checkpoint()
        if restored is not None:
            resume_from = restored.to_directory(str(Path(tmp) / "restored"))

        last_saved = time.monotonic()

        def report(metrics: dict[str, Any]) -> None:
            nonlocal last_saved
            path = metrics.get("checkpoint")
            due = metrics.get("done") or time.monotonic() - last_saved >= checkpoint_every_s
            checkpoint = None
            if path and due:
                checkpoint = tune.Checkpoint.from_directory(path)
                last_saved = time.monotonic()
            tune.report(reportable(metrics), checkpoint=checkpoint)

        checkpoint_dir = Path(tmp) / "checkpoint"
        summary = train(run_config, report, checkpoint_dir=checkpoint_dir, resume_from=resume_from)
    tune.report(summary_report(summary, ray.__version__))


def train_point_trial(config: dict[str, Any], **bound: Any) -> None:
    """An --extend's trial (sweeps.runtime.extend): ``train_trial`` of the point its config
    holds under ``POINT_KEY``."""
    train_trial(config[POINT_KEY], **bound)


def train_pack_trial(
    config: dict[str, Any],
    base: dict[str, Any],
    derived: dict[str, Derived],
    packs: list[list[Member]],
    checkpoint_every_s: float = 0.0,
) -> None:
    """Tune's function trainable of a packed sweep (sweeps.spec.packing): trains the members of pack
    ``config["pack"]`` together. Each report carries ``members``: ``{index in the pack: that
    member's metrics}`` for the members evaluated at one step, with the checkpoint of the whole
    pack that holds them; the last report carries every member's summary."""
    run_configs = [resolve_run_config(base, m.point, derived) for m in packs[config[PACK_KEY]]]
    _train_members(run_configs, checkpoint_every_s)


def train_seeds_trial(
    config: dict[str, Any],
    base: dict[str, Any],
    derived: dict[str, Derived],
    seeds: list[int],
    checkpoint_every_s: float = 0.0,
) -> None:
    """Tune's function trainable of Optuna's trials over seeds (``sweeps.spec.seed_trials``): the
    drawn ``config`` once per seed, the seeds trained as one pack. Each report carries the
    seeds' metrics as a pack's (``members``) and, beside them, the config's figures that the
    searcher and the scheduler read (``SeedsFigure``)."""
    from arith.training.cost import planned_steps
    from sweeps.spec.seed_trials import SeedsFigure, seed_points

    run_configs = [resolve_run_config(base, p, derived) for p in seed_points(config, seeds)]
    thresholds = [c.train.threshold for c in run_configs]
    figure = SeedsFigure(thresholds, [planned_steps(c) for c in run_configs])
    _train_members(run_configs, checkpoint_every_s, figure.update)


def _train_members(
    run_configs: list, checkpoint_every_s: float, figures: Callable[[dict], dict] | None = None
) -> None:
    """Train ``run_configs`` as one pack, reporting each step's evaluations (and at the end
    every member's summary) under ``members``, with the pack's checkpoint when
    ``checkpoint_every_s`` have passed; ``figures(evaluated)``: more values for the report's
    top level (seed trials)."""
    import time

    import ray
    from ray import tune

    from arith.training.trainer import train_pack
    from sweeps.runtime.placement import check_granted_gpu

    check_granted_gpu()
    with working_folder(PACK_SCRATCH) as tmp:
        resume_from = None
        restored = tune.get_checkpoint()
        if restored is not None:
            resume_from = restored.to_directory(str(Path(tmp) / "restored"))
        checkpoint_dir = Path(tmp) / "checkpoint"
        last_saved = time.monotonic()

        def report_step(evaluated: dict[int, dict[str, Any]]) -> None:
            nonlocal last_saved
            done = any(m.get("done") for m in evaluated.values())
            checkpoint = None
            if done or time.monotonic() - last_saved >= checkpoint_every_s:
                checkpoint = tune.Checkpoint.from_directory(checkpoint_dir)
                last_saved = time.monotonic()
            step = next(iter(evaluated.values()))["step"]
            plain = {i: reportable(m) for i, m in evaluated.items()}
            top = {} if figures is None else figures(plain)
            members = {str(i): m for i, m in plain.items()}
            tune.report({**top, "step": step, "members": members}, checkpoint=checkpoint)

        summaries = train_pack(
            run_configs,
            checkpoint_dir=checkpoint_dir,
            resume_from=resume_from,
            report_step=report_step,
        )
    reports = {str(i): summary_report(s, ray.__version__) for i, s in enumerate(summaries)}
    top = {} if figures is None else figures(dict(enumerate(map(reportable, summaries))))
    tune.report({**top, "members": reports})

"""The names of what ``train`` reports and returns for a config (``reported_metrics``), the rules
a sweep's spec is checked against before anything starts: apart from the training loop, so that
checking a spec imports no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arith.data import length_grid, length_probe
from arith.data.dataset import DATA_METRICS
from arith.evaluation.breakdowns import EVALUATED_TRAIN, set_metric_names
from arith.problems import tasks

if TYPE_CHECKING:
    from arith.config import RunConfig

HARDWARE_KEYS = (
    "hardware.device",
    "hardware.gpu_name",
    "hardware.precision",
    "hardware.torch",
    "hardware.cuda",
    "hardware.step",
)
"""What ``arith.training.device.hardware_record`` holds: strings, which a sweep logs as its run's
params (here, so that a sweep's driver reads them without importing torch)."""

# What ``train`` returns besides the final metrics: sizes, costs and thresholds reached.
SUMMARY_KEYS = (
    "n_params",
    "n_params_non_embedding",
    "flops_per_token",
    "steps",
    "tokens",
    "flops",
    "wall_time_s",
    "best/val/exact_match",
    "train/steps_to_100pct",
    "val/steps_to_threshold",
    "final_weights_step",
)

PERF_METRICS = (
    "perf/examples_per_s",
    "perf/tokens_per_s",
    "perf/pack_tokens_per_s",
    "perf/mfu",
    "perf/pack_mfu",
)
"""What ``Throughput.pop`` reports (the MFU pair only where the device's peak is known)."""

SPLIT_PAIRS = (("test", "val"),)
"""Evaluation sets that are splits of one space and must share no problem: ``data/test/
val_overlap``. (Every set's overlap with training is ``data/<set>/train_overlap``.)"""


def reported_metrics(config: RunConfig) -> set[str]:
    """Names of the metrics ``train`` reports or returns for this config (to validate sweeps).

    Each set's names come from ``arith.evaluation.breakdowns.set_metric_names``, the rules the
    evaluation itself follows; the sets are those ``arith.data.dataset.build_dataset`` adds.
    """
    names = {"step", "epoch", "lr", *EVALUATED_TRAIN}
    names |= {"time/elapsed_s", *PERF_METRICS}
    names |= {key for key in SUMMARY_KEYS if not key.startswith("best/")}
    names.add("best/" + config.train.monitor)
    task, data = config.task, config.data
    trained = range(1, task.n_digits + 1)
    sets = {"val": trained, "test": trained}
    for name, lo_hi in (("longer", data.longer_n_digits), ("longer_val", data.longer_val_n_digits)):
        if lo_hi:
            sets[name] = range(lo_hi[0], lo_hi[1] + 1)
    if data.edge_cases and tasks.edge_cases(task) is not None:
        sets["edge"] = trained
    if data.carry_size:
        sets["carry"] = trained
    if data.cascade_problems(task):
        sets["cascade"] = trained
    if data.ood_spacing:
        sets["ood"] = trained
    if data.longer_n_digits:
        names.add(length_grid.SUCCESS_KEY)
    if data.length_grid_max:
        names |= length_grid.metric_names(data.length_grid_max, data.length_grid_step)
        names |= {f"data/length_grid/{key}" for key in DATA_METRICS}
    if data.length_probe_max:
        names |= length_probe.metric_names(task.n_digits, data.length_probe_max)
    longest = data.longest_operand(task)
    for name, lengths in sets.items():
        keys = set_metric_names(
            task,
            config.format.name,
            reference_differs=name == "ood",  # spaced prompts, answers expected as trained
            lengths=lengths,
            max_chain=longest,
            decoded=name != "val",  # training's periodic evaluations: member_run.step_metrics
        )
        names |= {f"{name}/{key}" for key in keys}
        names |= {f"data/{name}/{key}" for key in DATA_METRICS}
    names |= {f"data/{name}/{other}_overlap" for name, other in SPLIT_PAIRS}
    return names

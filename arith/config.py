"""The run config: one frozen dataclass per concern, composed; YAML and ``--set`` loading.

YAML maps 1:1 onto the dataclasses, so ``model.n_layer`` names the same field in a config file,
a ``--set`` override, a sweep's search space, an MLflow parameter and a table column::

    task: {name: addition, n_digits: 4, operand_lengths: fixed}
    format: {name: plain}
    model: {n_layer: 4, d_model: 128, n_head: 4}
    train: {max_steps: 3000, batch_size: 128}
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from arith import dataconf
from arith.data import length_grid, length_probe
from arith.data.dataset import DataConfig
from arith.errors import ConfigError, require
from arith.evaluation.breakdowns import evaluated_metrics
from arith.model.modelconf import ModelConfig
from arith.problems.tasks import TaskConfig
from arith.text.formats import FormatConfig, check_abacus_table
from arith.training.optimconf import OptimConfig
from arith.training.trainconf import TrainConfig


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs; nothing else (no tracking URIs, no sweep settings)."""

    task: TaskConfig = field(default_factory=TaskConfig)
    format: FormatConfig = field(default_factory=FormatConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        fmt, task, pos = self.format.name, self.task.name, self.model.position
        require(
            not (pos in ("abacus", "abacus_bias") and fmt == "base100"),
            "model.position",
            f"{pos} counts single digits, so it cannot be used with format.name=base100; "
            "use learned, rope or none",
        )
        require(
            not (fmt in ("carry_trace", "base100") and task == "sorting"),
            "format.name",
            f"{fmt!r} has no encoding for sorting; use plain or reversed",
        )
        require(
            not (self.data.ood_spacing and fmt != "plain"),
            "data.ood_spacing",
            f"the spaced OOD set tests a model trained on plain, but format.name is {fmt!r}",
        )
        require(
            not (self.data.longer_n_digits and task in ("modular", "multi_op")),
            "data.longer_n_digits",
            f"task {task!r} has fixed operand sizes; longer operands need addition, "
            "multiplication or sorting",
        )
        require(
            not (self.data.length_grid_max and task not in length_grid.TASKS),
            "data.length_grid_max",
            f"the grid sets the lengths of two operands ({' or '.join(length_grid.TASKS)}), "
            f"but task.name is {task!r}",
        )
        require(
            not (self.data.length_probe_max and task not in length_probe.TASKS),
            "data.length_probe_max",
            f"the probe knows the carry edge cases of {' and '.join(length_probe.TASKS)}, "
            f"but task.name is {task!r}",
        )

        require(
            not (self.data.carry_size and task != "addition"),
            "data.carry_size",
            f"the carry set holds additions, but task.name is {task!r}",
        )
        require(
            not (self.data.cascade_size and (task != "addition" or self.task.n_digits < 2)),
            "data.cascade_size",
            f"the cascade set holds additions of 2 digits or more, but task.name is {task!r} "
            f"with n_digits={self.task.n_digits}",
        )
        self.data.check_task(self.task)
        self._check_monitor()
        if pos == "abacus":
            longest = self.data.longest_operand(self.task)
            check_abacus_table(self.format, self.task, self.model.abacus_max_k, longest)

    def _check_monitor(self) -> None:
        """``train.monitor`` must be something every evaluation reports: one never reported
        would leave early stopping, the target and the best weights silently unused."""
        monitor = self.train.monitor
        longest = self.data.longest_operand(self.task)
        evaluated = evaluated_metrics(self.task, self.format.name, longest)
        if monitor in evaluated:
            return
        as_val = "val/" + monitor.split("/", 1)[-1]  # test/exact_match: val/exact_match
        near = [as_val] if as_val in evaluated else difflib.get_close_matches(monitor, evaluated)
        hint = f"did you mean {near[0]}? " if near else ""
        main = "train/loss, train/exact_match, val/exact_match, val/loss, val/token_accuracy"
        raise ConfigError(
            "train.monitor",
            f"{monitor!r} is not reported at every evaluation; {hint}one of {main} or a "
            f"val/exact_match breakdown ({len(evaluated)} names for this task); the final "
            "sets (test/, edge/, ...) are measured once, at the end",
        )

    def to_dict(self) -> dict[str, Any]:
        return dataconf.to_dict(self)

    def flat(self) -> dict[str, Any]:
        """Dotted paths to values: ``{"model.n_layer": 2, ...}``."""
        return dataconf.flatten(self.to_dict())


def from_dict(data: dict[str, Any] | None) -> RunConfig:
    """A RunConfig from nested plain data; raises ConfigError naming the bad dotted path. A key
    put in the wrong section is pointed to its own (``train.lr``: did you mean ``optim.lr``?)."""
    try:
        return dataconf.from_dict(RunConfig, data or {})
    except dataconf.UnknownKeyError as err:
        homes = sorted(
            p for p in dataconf.field_paths(RunConfig) if p.rsplit(".", 1)[-1] == err.key
        )
        if not homes:
            raise
        section = homes[0].rsplit(".", 1)[0]
        hint = f" {err.key} is a key of {section}: did you mean {homes[0]}?"
        raise dataconf.UnknownKeyError(err.path, err.key, err.allowed, hint) from None


# YAML 1.1 (PyYAML) reads 1e-3 as the string "1e-3"; a float needs a dot (1.0e-3). Researchers
# write learning rates as 1e-3, so such strings become floats where YAML is read.
_SCIENTIFIC = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def with_floats(value: Any) -> Any:
    """``value`` with every string in scientific notation (``"1e-3"``) as a float, recursively."""
    if isinstance(value, str) and _SCIENTIFIC.fullmatch(value.strip()):
        return float(value)
    if isinstance(value, dict):
        return {k: with_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_floats(v) for v in value]
    return value


def load_yaml(path: str | Path, label: str = "config", allow_empty: bool = True) -> dict[str, Any]:
    """A YAML file's mapping as nested dicts (``yaml.safe_load``: specs are data, not code).

    Every way a file can be unreadable is a ConfigError under ``label``, never a traceback.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(label, f"cannot read {str(path)!r}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(label, f"{path} is not UTF-8 text (byte {err.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(label, f"{path}{where} is not valid YAML") from None
    except (ValueError, RecursionError) as err:  # an integer of 4300+ digits; deep nesting
        reason = str(err).split(";")[0][:120] or type(err).__name__
        raise ConfigError(label, f"{path} holds a value YAML cannot read: {reason}") from None
    if data is None and allow_empty:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(label, f"{path} must hold a mapping, but holds {type(data).__name__}")
    return with_floats(data)


def parse_override(text: str) -> tuple[str, Any]:
    """``"model.n_layer=4"`` -> ``("model.n_layer", 4)``; the value is read as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--set", f"expected dotted.key=value, but got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, with_floats(value)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``dotted.key=value`` applied."""
    out = _deep_copy(data)
    for text in overrides:
        key, value = parse_override(text)
        dataconf.set_dotted(out, key, value)
    return out


def load(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """The RunConfig of a YAML file (or the defaults) with ``--set`` overrides applied."""
    data = load_yaml(path) if path is not None else {}
    return from_dict(apply_overrides(data, list(overrides)))


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data

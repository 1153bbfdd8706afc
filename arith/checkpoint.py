"""Checkpoints that resume exactly: model, optimiser, schedule, data cursor, RNGs and loop state.

A run resumed from a checkpoint continues bit-identically on CPU. Files are written to a temporary
name and renamed, so a run killed mid-save leaves the previous checkpoint intact; they load with
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml

if TYPE_CHECKING:
    from arith.config import RunConfig
    from arith.data import BatchSource
    from arith.trainer import TrainConfig

FILE = "checkpoint.pt"
MODEL_FILE = "model.pt"  # the final model alone: what predict loads and a sweep logs to MLflow


@dataclass
class LoopState:
    """What the loop knows besides the model: step, early-stopping bookkeeping, thresholds."""

    step: int = 0
    last_report_step: int = -1
    best: float | None = None
    evals_without_improvement: int = 0
    steps_to_100pct: int | None = None
    steps_to_threshold: int | None = None
    elapsed_before: float = 0.0
    elapsed_at_save: float = 0.0

    def update(self, metrics: dict[str, float], step: int, tc: TrainConfig) -> str | None:
        """Record an evaluation; the reason to stop, if any."""
        self.step = step
        if self.steps_to_100pct is None and metrics.get("train/exact_match", 0.0) >= 1.0:
            self.steps_to_100pct = step
        if self.steps_to_threshold is None and metrics.get("val/exact_match", 0.0) >= tc.threshold:
            self.steps_to_threshold = step
        value = metrics.get(tc.monitor)
        if value is None:
            return None
        sign = 1.0 if tc.higher_is_better else -1.0
        if self.best is None or sign * (value - self.best) > tc.min_delta:
            self.best, self.evals_without_improvement = value, 0
        else:
            self.evals_without_improvement += 1
        if step < tc.min_steps:
            return None
        if tc.target is not None and sign * (value - tc.target) >= 0:
            return "target_reached"
        if tc.patience is not None and self.evals_without_improvement >= tc.patience:
            return "early_stopping"
        return None


def save(
    directory: str | Path,
    config: RunConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batches: BatchSource,
    generator: torch.Generator,
    state: LoopState,
) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": config.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "batches": batches.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generator": generator.get_state(),
        "loop": asdict(state),
    }
    return _write(directory, FILE, payload, config)


def read(directory: str | Path) -> dict[str, Any]:
    """The raw checkpoint payload (weights only: no code is unpickled)."""
    path = Path(directory)
    path = path / FILE if path.is_dir() else path
    return torch.load(path, map_location="cpu", weights_only=True)


def load(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batches: BatchSource,
    generator: torch.Generator,
) -> LoopState:
    payload = read(directory)
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    batches.load_state_dict(payload["batches"])
    torch.set_rng_state(payload["torch_rng"])
    if payload["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(payload["cuda_rng"])
    generator.set_state(payload["generator"])
    state = LoopState(**payload["loop"])
    state.elapsed_before = state.elapsed_at_save
    return state


def save_model(
    directory: str | Path, config: RunConfig, model: torch.nn.Module, weights: str, step: int
) -> Path:
    """The final model: config, weights and which weights they are (``best`` by the monitor
    when early stopping is on, else ``last``), beside ``config.yaml``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": config.to_dict(),
        "model": model.state_dict(),
        "weights": weights,
        "step": step,
    }
    return _write(directory, MODEL_FILE, payload, config)


def _write(directory: Path, name: str, payload: dict[str, Any], config: RunConfig) -> Path:
    """``payload`` saved as ``directory/name`` in one rename (a kill leaves the old file or the
    new one, never half of one), with the run's ``config.yaml`` beside it."""
    tmp = directory / (name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, directory / name)
    (directory / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    return directory / name


def read_model(path: str | Path) -> dict[str, Any]:
    """``model.pt`` of a folder (else its checkpoint's model), or the given file."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE if (path / MODEL_FILE).is_file() else path / FILE
    return torch.load(path, map_location="cpu", weights_only=True)


def export_model(checkpoint_dir: str | Path, into: str | Path) -> Path:
    """``model.pt`` and ``config.yaml`` of a run's checkpoint folder, copied into ``into``: its
    own ``model.pt`` when the run finished, else the checkpoint's (last) weights."""
    source, into = Path(checkpoint_dir), Path(into)
    into.mkdir(parents=True, exist_ok=True)
    payload = read_model(source)
    if "weights" not in payload:  # a checkpoint of a run stopped before its end
        step = int(payload.get("loop", {}).get("step", 0))
        payload = {"config": payload["config"], "model": payload["model"], "weights": "last"}
        payload["step"] = step
    torch.save(payload, into / MODEL_FILE)
    (into / "config.yaml").write_text(yaml.safe_dump(payload["config"], sort_keys=False))
    return into

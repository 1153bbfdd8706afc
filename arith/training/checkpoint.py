"""Checkpoints that resume exactly: model, optimiser, schedule, data cursor, RNGs and loop state
(the early-stopping monitor and its best weights, per member).

A run resumed from a checkpoint continues bit-identically on CPU. Files are written to a temporary
name and renamed, so a run killed mid-save leaves the previous checkpoint intact; they load with
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml

from arith.training.stopping import LoopState

if TYPE_CHECKING:
    from arith.config import RunConfig
    from arith.data.batches import BatchSource
    from arith.training.optim import PackedAdamW

FILE = "checkpoint.pt"
MODEL_FILE = "model.pt"  # the final model alone: what predict loads and a sweep logs to MLflow


def save(
    directory: str | Path,
    configs: list[dict[str, Any]],
    model: torch.nn.Module,
    optimizer: PackedAdamW,
    batches: list[dict[str, Any]],
    generators: list[torch.Tensor],
    states: list[LoopState],
) -> Path:
    """Save a run (or a pack of runs: one entry per member in each list) and return the file.

    ``config`` is the first member's config, so a one-member checkpoint reads as one run.
    ``batches`` and ``generators`` are the states of the members' batch sources and Abacus
    offset generators where the loop's last batch left them (the sources themselves may be
    ahead: arith.training.prefetch builds batches before the loop takes them).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": configs[0],
        "configs": configs,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "batches": batches,
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": generators,
        "loops": [s.to_dict() for s in states],
    }
    return _write(directory, FILE, payload, configs[0])


def read(directory: str | Path) -> dict[str, Any]:
    """The raw checkpoint payload (weights only: no code is unpickled)."""
    path = Path(directory)
    path = path / FILE if path.is_dir() else path
    return torch.load(path, map_location="cpu", weights_only=True)


def load(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: PackedAdamW,
    batches: list[BatchSource],
    generators: list[torch.Generator],
) -> list[LoopState]:
    """Restore what ``save`` wrote into the given objects; the members' loop states."""
    payload = read(directory)
    if len(payload["loops"]) != len(batches):
        raise ValueError(
            f"checkpoint holds {len(payload['loops'])} member(s), the run has {len(batches)}"
        )
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    for source, state in zip(batches, payload["batches"], strict=True):
        source.load_state_dict(state)
    torch.set_rng_state(payload["torch_rng"])
    if payload["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(payload["cuda_rng"])
    for generator, state in zip(generators, payload["generators"], strict=True):
        generator.set_state(state)
    states = [LoopState(**loop) for loop in payload["loops"]]
    for state in states:
        state.elapsed_before = state.elapsed_at_save
    return states


def member_dir(directory: str | Path, member: int, n_members: int) -> Path:
    """Where member ``member`` of a pack keeps its final model: the run folder itself for a
    pack of one (so an unpacked run's layout is unchanged), else ``member-<i>/`` inside it."""
    directory = Path(directory)
    return directory if n_members == 1 else directory / f"member-{member}"


def member_folder(checkpoint_dir: str | Path, member: int | None) -> Path:
    """The folder of a run's checkpoint that holds member ``member``'s own files (``None``:
    an unpacked run's, the folder itself)."""
    source = Path(checkpoint_dir)
    n_members = 1
    if member is not None and (source / FILE).is_file():
        n_members = len(read(source)["loops"])
    return member_dir(source, member or 0, n_members)


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
    return _write(directory, MODEL_FILE, payload, payload["config"])


def _write(directory: Path, name: str, payload: dict[str, Any], config: dict[str, Any]) -> Path:
    """``payload`` saved as ``directory/name`` in one rename (a kill leaves the old file or the
    new one, never half of one), with the run's ``config.yaml`` beside it."""
    save_atomic(directory / name, payload)
    (directory / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return directory / name


def save_atomic(path: Path, payload: Any) -> None:
    """``payload`` saved with torch as ``path`` in one rename: a kill leaves the old file or
    the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def read_model(path: str | Path) -> dict[str, Any]:
    """``model.pt`` of a folder (else its checkpoint's model), or the given file."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE if (path / MODEL_FILE).is_file() else path / FILE
    return torch.load(path, map_location="cpu", weights_only=True)


def export_model(checkpoint_dir: str | Path, into: str | Path, member: int | None = None) -> Path:
    """``model.pt`` and ``config.yaml`` of a run's checkpoint folder, copied into ``into``: its
    own ``model.pt`` when the run finished, else the checkpoint's (last) weights.

    ``member``: which member of a pack checkpoint (``None`` for an unpacked run).
    """
    source, into = Path(checkpoint_dir), Path(into)
    into.mkdir(parents=True, exist_ok=True)
    own = member_folder(source, member)
    if (own / MODEL_FILE).is_file():
        payload = read_model(own)
    else:  # a checkpoint of a run stopped before its end: its last weights
        stored = read(source)
        i = member or 0
        loops = stored.get("loops") or [stored.get("loop", {})]
        model = stored["model"]
        if len(loops) > 1:  # a pack's parameters lead with the member dimension
            model = {k: v[i : i + 1].clone() for k, v in model.items()}
        config = stored["configs"][i] if "configs" in stored else stored["config"]
        step = int(loops[i].get("step", 0))
        payload = {"config": config, "model": model, "weights": "last", "step": step}
    torch.save(payload, into / MODEL_FILE)
    (into / "config.yaml").write_text(yaml.safe_dump(payload["config"], sort_keys=False))
    return into

"""Checkpoints that resume exactly: model, optimiser, schedule, data cursor, RNGs and loop state.

A run resumed from a checkpoint continues bit-identically on CPU. Files are written to a temporary
name and renamed, so a run killed mid-save leaves the previous checkpoint intact; they load with
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml

from arith.stopping import LoopState

if TYPE_CHECKING:
    from arith.data import BatchSource
    from arith.optim import PackedAdamW

FILE = "checkpoint.pt"


def save(
    directory: str | Path,
    configs: list[dict[str, Any]],
    model: torch.nn.Module,
    optimizer: PackedAdamW,
    batches: list[BatchSource],
    generators: list[torch.Generator],
    states: list[LoopState],
) -> Path:
    """Save a run (or a pack of runs: one entry per member in each list) and return the file.

    ``config`` is the first member's config, so a one-member checkpoint reads as one run.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": configs[0],
        "configs": configs,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "batches": [b.state_dict() for b in batches],
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": [g.get_state() for g in generators],
        "loops": [asdict(s) for s in states],
    }
    tmp = directory / (FILE + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, directory / FILE)
    (directory / "config.yaml").write_text(yaml.safe_dump(configs[0], sort_keys=False))
    return directory / FILE


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

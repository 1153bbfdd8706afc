"""What a run's data and its token embeddings look like, as plain numbers (seeds 000 and 001).

Two instruments, both cheap enough for every run:

- ``data_diagnostics(dataset, train)``: once, when the data is built. Every evaluation set's
  overlap with training (``Dataset.records``, measured where the set was filtered) and
  validation's with test (two splits, so 0 by construction), and per set (training first)
  histograms of the answer's length and value and of the longest carry chain
  (``arith.problems.carries``), each summing to the set's size. Seed 000 checks its data this way.
- ``RunDiagnostics.record``: at every evaluation, the token embedding table (vocab x d floats),
  kept in the run's checkpoint folder (``diagnostics.pt``), so a restored run keeps its
  earlier points. ``trajectories`` projects them all on one basis at the end (seed 001's
  embedding-trajectory plot).

``export`` writes both as JSON for a sweep's driver, which draws and logs them; nothing here
draws.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arith.data.dataset import Dataset
from arith.problems import carries, tasks
from arith.problems.tasks import Problems
from arith.training.checkpoint import member_folder, save_atomic
from arith.training.reported import SPLIT_PAIRS

FILE = "diagnostics.pt"
"""In a run's (or pack member's) checkpoint folder: the data diagnostics and the snapshots."""
DATA_JSON = "diagnostics/data.json"
EMBEDDINGS_JSON = "embeddings.json"
"""What ``export`` writes, under these names (the artifact paths of a trial's MLflow run)."""

MAX_SNAPSHOTS = 64
"""Embedding snapshots kept at most (the last aside); past this, every other one is dropped
(``RunDiagnostics.stride``), so a long run's file stays small (64 x vocab x d floats)."""
VALUE_BINS = 20
"""Bins of the answer-value histogram, shared by all sets of a run."""
USED_SAMPLE = 4096
"""Training problems encoded to find the tokens training writes (every operator and digit of a
task turns up in far fewer)."""


def data_diagnostics(dataset: Dataset, train: Problems) -> dict[str, Any]:
    """Overlaps and histograms of the run's sets as JSON-able data (module docstring).

    ``train``: the training pool, or a sample of the training split where training draws
    fresh problems each step (its histograms then describe that sample).
    """
    sets = {"train": train, **dataset.eval_sets}
    overlap = {name: {"train": r.train_overlap} for name, r in dataset.records.items()}
    for name, other in SPLIT_PAIRS:
        if name in sets and other in sets:
            shared = np.isin(sets[name].keys(), sets[other].keys())
            overlap.setdefault(name, {})[other] = int(shared.sum())
    values = {name: answer_values(p) for name, p in sets.items()}
    low = min((float(v.min()) for v in values.values() if len(v)), default=0.0)
    high = max((float(v.max()) for v in values.values() if len(v)), default=1.0)
    edges = np.linspace(low, max(high, low + 1.0), VALUE_BINS + 1)
    symbols = tasks.op_symbols(dataset.task)
    histograms = {
        name: {
            "size": len(problems),
            "answer_length": _counts(problems.answer_len),
            "answer_value": np.histogram(values[name], bins=edges)[0].tolist(),
            # -1: a problem whose operation has no carry chain (``*``, ``//``, sorting)
            "carry_chain": _counts(carries.longest_chain(problems, symbols)),
        }
        for name, problems in sets.items()
    }
    return {"overlap": overlap, "value_edges": edges.tolist(), "sets": histograms}


def overlap_metrics(diagnostics: dict[str, Any]) -> dict[str, int]:
    """``data/<set>/<other>_overlap`` of the split pairs (``SPLIT_PAIRS``); must be 0."""
    return {
        f"data/{name}/{other}_overlap": diagnostics["overlap"].get(name, {}).get(other, 0)
        for name, other in SPLIT_PAIRS
    }


def answer_values(problems: Problems) -> np.ndarray:
    """(N,) each answer as a float (exact below 2**53; a histogram needs no more)."""
    width = problems.answer.shape[1]
    powers = 10.0 ** np.arange(width - 1, -1, -1)
    values = problems.answer.astype(np.float64) @ powers
    return np.where(problems.answer_negative, -values, values)


def _counts(values: np.ndarray) -> dict[str, int]:
    """``{value: count}`` of an integer array, keys as strings (JSON), in increasing order."""
    found, counts = np.unique(values, return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(found, counts, strict=True)}


@dataclass
class RunDiagnostics:
    """One run's diagnostics: its data's (fixed at build) and its embedding snapshots."""

    data: dict[str, Any]
    tokens: list[str]
    """Each token's text, by id (the format's vocabulary)."""
    used: list[int]
    """Ids of the tokens training writes (the rest barely move; plots leave them out)."""
    steps: list[int] = field(default_factory=list)
    snapshots: list[torch.Tensor] = field(default_factory=list)
    """(vocab, d) float32 on the CPU, one per step of ``steps``."""
    evaluations: list[int] = field(default_factory=list)
    """Each kept snapshot's evaluation, counted from 0."""
    stride: int = 1
    """Evaluations between kept snapshots (the last aside): doubled whenever more than
    ``MAX_SNAPSHOTS`` are kept, so the kept ones stay evenly spread."""

    @classmethod
    def build(cls, dataset: Dataset, train: Problems) -> RunDiagnostics:
        head = train.take(np.arange(min(len(train), USED_SAMPLE)))  # a shuffled pool's first
        used = np.unique(dataset.format.encode(head).tokens)
        used = [int(i) for i in used if i != dataset.format.pad_id]
        data = data_diagnostics(dataset, train)
        return cls(data=data, tokens=list(dataset.format.vocab), used=used)

    def record(self, step: int, model: torch.nn.Module, folder: Path | None) -> None:
        """Keep the embedding table at ``step`` (``model``: one member, ``wte`` (1, vocab, d))
        and, with a checkpoint ``folder``, write everything there before the checkpoint."""
        number = self.evaluations[-1] + 1 if self.evaluations else 0
        while self.steps and self.steps[-1] >= step:  # a step measured again replaces its point
            number = self.evaluations[-1]
            self._keep(range(len(self.steps) - 1))
        if self.evaluations and self.evaluations[-1] % self.stride:  # the last end, off stride
            self._keep(range(len(self.steps) - 1))
        self.steps.append(step)
        self.snapshots.append(model.wte.weight[0].detach().float().cpu().clone())
        self.evaluations.append(number)
        if len(self.steps) > MAX_SNAPSHOTS:
            self.stride *= 2
            last = len(self.steps) - 1
            self._keep(
                [i for i, n in enumerate(self.evaluations) if n % self.stride == 0 or i == last]
            )
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            save_atomic(folder / FILE, self.state_dict())

    def _keep(self, rows) -> None:
        """Keep only the snapshots at positions ``rows``."""
        rows = list(rows)
        self.steps = [self.steps[i] for i in rows]
        self.snapshots = [self.snapshots[i] for i in rows]
        self.evaluations = [self.evaluations[i] for i in rows]

    def state_dict(self) -> dict[str, Any]:
        embeddings = torch.stack(self.snapshots) if self.snapshots else torch.empty(0)
        return {
            "data": self.data,
            "tokens": self.tokens,
            "used": self.used,
            "steps": self.steps,
            "evaluations": self.evaluations,
            "stride": self.stride,
            "embeddings": embeddings,  # (S, vocab, d)
        }

    def restore(self, folder: Path) -> None:
        """The snapshots a checkpoint folder holds (a run restored from it continues them)."""
        path = Path(folder) / FILE
        if not path.is_file():  # a checkpoint from before diagnostics: start the track anew
            return
        payload = torch.load(path, map_location="cpu", weights_only=True)
        self.steps, self.stride = list(payload["steps"]), payload["stride"]
        self.evaluations = list(payload["evaluations"])
        self.snapshots = list(payload["embeddings"].unbind(0)) if self.steps else []


def trajectories(steps: list[int], embeddings: torch.Tensor, used: list[int]) -> dict[str, Any]:
    """Every snapshot (S, vocab, d) projected on the two principal components of the last.

    One basis for all, so a point's movement is the token's own: a basis computed per
    evaluation would turn with the table, and sign alignment fixes flips, not rotations. The
    final table's is the natural one: its axes show the structure training ends with (digits in
    order, operators apart), and earlier points show the way there. The components are those
    of the ``used`` tokens, centred on their final mean: the unused rows keep their random
    start, and would otherwise take a share of the components.
    """
    final = embeddings[-1, used or slice(None)].double()
    mean = final.mean(dim=0)
    _, singular, vh = torch.linalg.svd(final - mean, full_matrices=False)
    basis = vh[:2].T  # (d, 2); a d of 1 gives one component
    variance = singular**2
    explained = (variance[:2] / variance.sum().clamp(min=1e-30)).tolist()
    coords = (embeddings.double() - mean) @ basis  # (S, vocab, k)
    return {
        "steps": list(steps),
        "coords": coords.permute(1, 0, 2).tolist(),  # per token: its (x, y) at each step
        "explained_variance": explained,
    }


def export(checkpoint_dir: str | Path, into: str | Path, member: int | None = None) -> list[Path]:
    """``diagnostics/data.json`` and ``embeddings.json`` of a run's checkpoint folder (its
    member ``member`` for a pack), written under ``into``; the files written (none where the
    folder holds no diagnostics)."""
    path = member_folder(checkpoint_dir, member) / FILE
    if not path.is_file():
        return []
    payload = torch.load(path, map_location="cpu", weights_only=True)
    into = Path(into)
    written = [into / DATA_JSON]
    written[0].parent.mkdir(parents=True, exist_ok=True)
    written[0].write_text(json.dumps(payload["data"]))
    if payload["steps"]:
        track = trajectories(payload["steps"], payload["embeddings"], payload["used"])
        track.update(tokens=payload["tokens"], used=payload["used"])
        written.append(into / EMBEDDINGS_JSON)
        written[1].write_text(json.dumps(track))
    return written

"""Where a sweep's trials train, decided once when it starts (``resolve``), printed, saved in
``sweep.json`` and reused by ``--resume`` and ``--extend`` (``Placement.to_state``), so that a
changed cluster never regroups ``pack: auto``'s packs or changes a trial's share mid-sweep.

``sweep.resources.gpu: auto`` decides on the cluster as it is and can become
(``sweeps.runtime.cluster_view``): no GPU anywhere, 0 (the trials train on CPUs as before);
else a share per trial by ``GPU_AUTO_RULE``, and on a cluster whose GPU nodes are not up yet
(an autoscaler's GPU group at 0 replicas) the trials wait for them, said in one line. A number
asks for that share; on a cluster without GPUs that cannot add any it is one line before
anything starts. Where a cluster also has nodes without GPUs, ``auto`` gives trials to both:
a trial's class (GPU or CPU) follows its key, in the proportion of the trials each kind of
node holds at once.

``sweep.max_concurrent`` caps the trials at once on a Ray the sweep starts itself
(``sweeps.runtime.tuning.TRIAL_SLOT``) and Optuna's trials everywhere; on a cluster, grid and
random search run what its resources hold, and the GPU share follows those, not the cap.

A trial with ``train.device: auto`` trains on CUDA when Ray grants it a GPU share (Ray hides
the GPUs from a trial that reserves none, ``sweeps.runtime.driver.QUIET_WARNINGS``).
"""

from __future__ import annotations

import math
import os
import zlib
from dataclasses import dataclass

from sweeps.runtime.cluster_view import ClusterView

GPU_AUTO_RULE = (
    "with G GPUs and C trials at once on their nodes, a whole GPU each where C <= G, else "
    "1/ceil(C/G); 0 without GPUs or with train.device=cpu"
)
# A trial Ray granted a GPU that torch cannot see trains on the CPU instead of failing, where
# this is set: for clusters whose GPUs are declared but not there (the tests' fake GPU node).
CPU_FOR_UNSEEN_GPU_ENV = "SWEEPS_CPU_FOR_UNSEEN_GPU"


def gpu_share(n_gpus: float, concurrent: int) -> float:
    """``GPU_AUTO_RULE``'s share for ``n_gpus`` GPUs and ``concurrent`` trials at once: 1 where
    every trial can hold a whole GPU, else 1/k so that k trials fill one (Ray schedules a
    fraction only onto one GPU, so 1/k with k whole packs a GPU with no remainder)."""
    if n_gpus <= 0:
        return 0.0
    concurrent = max(1, concurrent)
    if concurrent <= n_gpus:
        return 1.0
    # Down to Ray's resolution of a share (1e-4), so that k shares never add up to more than one
    return math.floor(1e4 / math.ceil(concurrent / n_gpus)) / 1e4


@dataclass(frozen=True)
class Placement:
    """A sweep's placement: ``gpu``, the share of a trial (or pack) that trains on a GPU;
    ``gpu_slots`` and ``cpu_slots``, the trials the GPU nodes and the nodes without GPUs hold
    at once (``cpu_slots`` 0: every trial asks for ``gpu``); ``waits``: the GPUs are not up
    yet, the autoscaler adds them; ``cluster``: what it was decided on."""

    gpu: float
    gpu_slots: int
    cpu_slots: int
    waits: bool
    cluster: ClusterView

    def trial_gpu(self, key: str) -> float:
        """The GPU share of the trial (or pack) ``key``: ``gpu``, or on a mixed cluster 0 for
        the trials whose key falls in the CPU nodes' part (the same trial, the same class,
        whatever the cluster later is)."""
        if self.gpu == 0 or self.cpu_slots == 0:
            return self.gpu
        cycle = self.gpu_slots + self.cpu_slots
        return self.gpu if zlib.crc32(key.encode()) % cycle < self.gpu_slots else 0.0

    def describe(self) -> str:
        """One line: the share, where trials go, and what it was decided on."""
        if self.gpu == 0:
            where = "no GPU per trial: the trials train on CPUs"
        else:
            where = f"{self.gpu:.4g} GPU per trial ({self.gpu_slots} at once on the GPUs"
            where += f", {self.cpu_slots} on the nodes without GPUs)" if self.cpu_slots else ")"
        waits = "; the GPU nodes are not up: the trials wait for the autoscaler to add them"
        return f"placement: {where}; decided on {self.cluster.describe()}" + (
            waits if self.waits else ""
        )

    def to_state(self) -> dict:
        return {
            "gpu": self.gpu,
            "gpu_slots": self.gpu_slots,
            "cpu_slots": self.cpu_slots,
            "waits": self.waits,
            "cluster": self.cluster.to_state(),
        }

    @classmethod
    def from_state(cls, state: dict) -> Placement:
        return cls(
            float(state["gpu"]),
            int(state["gpu_slots"]),
            int(state["cpu_slots"]),
            bool(state.get("waits", False)),
            ClusterView.from_state(state["cluster"]),
        )


def train_device(spec) -> str:
    """The base config's ``train.device`` (``auto`` unless the spec names one)."""
    return str(spec.base.get("train", {}).get("device", "auto"))


def resolve(spec, cluster: ClusterView) -> Placement:
    """The sweep's placement on ``cluster`` (see the module docstring)."""
    s = spec.sweep
    cpu = max(s.resources.cpu, 1e-9)
    gpus_most = cluster.total("gpus", most=True)
    waits = gpus_most > 0 and cluster.total("gpus") == 0
    if s.resources.gpu != "auto":
        share = float(s.resources.gpu)
        slots = int(gpus_most / share) if share > 0 else 0
        return Placement(share, slots, 0, waits and share > 0, cluster)
    if train_device(spec).split(":")[0] == "cpu" or gpus_most == 0:
        return Placement(0.0, 0, 0, False, cluster)
    on_gpu_nodes = int(cluster.cpus_on(gpu_nodes=True) // cpu)
    cpu_slots = 0 if cluster.local else int(cluster.cpus_on(gpu_nodes=False) // cpu)
    caps = s.max_concurrent and (cluster.local or s.search == "optuna")
    concurrent = min(on_gpu_nodes, s.max_concurrent) if caps else on_gpu_nodes
    share = gpu_share(gpus_most, concurrent)
    gpu_slots = min(concurrent, int(gpus_most / share))
    return Placement(share, gpu_slots, cpu_slots, waits, cluster)


def gpu_refusal(spec, placement: Placement) -> str | None:
    """One line when the sweep asks for a GPU the cluster has not and cannot add (a share >
    0, or ``train.device: cuda``), else None; checked before any trial starts."""
    if placement.cluster.total("gpus", most=True) > 0:
        return None
    gpu = spec.sweep.resources.gpu
    if gpu != "auto" and gpu > 0:
        return (
            f"sweep.resources.gpu: {gpu} asks for a GPU, but the cluster has none "
            "(set 0, or auto to use GPUs where there are some)"
        )
    device = train_device(spec)
    if device.split(":")[0] == "cuda":
        return (
            f"base.train.device: {device} asks for a GPU, but the cluster has none "
            "(set auto to train on the CPU here)"
        )
    return None


def place_sweep(spec, out_dir, *, continuing: bool, local: bool, disconnect: bool):
    """The sweep's placement (``sweeps.runtime.placement``): the one ``sweep.json`` saved when
    it started, for a sweep it continues, else decided now on the cluster (this machine, for
    the local Ray it starts) and said in one line where it is not the plain CPU one. None (the
    line printed) when it asks for a GPU that is not there."""
    import sys

    import ray

    from sweeps.runtime.cluster_view import read_cluster, this_machine
    from sweeps.runtime.state import read_state

    saved = read_state(out_dir).get("placement") if continuing else None
    if saved:
        placement = Placement.from_state(saved)
        if not local or placement.gpu > 0:
            print(f"{placement.describe()}, when the sweep started", file=sys.stderr)
        return placement
    placement = resolve(spec, this_machine() if local else read_cluster())
    refusal = gpu_refusal(spec, placement)
    if refusal is not None:
        if disconnect:
            ray.shutdown()
        print(f"error: {refusal}", file=sys.stderr)
        return None
    if not local or placement.gpu > 0:
        print(placement.describe(), file=sys.stderr)
    return placement


def granted_gpu_refusal(gpu_ids: list, cuda_available: bool) -> str | None:
    """One line when Ray granted the trial GPUs (``gpu_ids``) that torch cannot see."""
    if gpu_ids and not cuda_available:
        return (
            f"this trial was granted GPU {','.join(map(str, gpu_ids))}, but torch cannot see "
            "it (torch.cuda.is_available() is False: a CPU-only torch, or a driver missing)"
        )
    return None


def check_granted_gpu() -> None:
    """In a trial, before it builds anything: raise RuntimeError with ``granted_gpu_refusal``'s
    line when Ray granted a GPU that torch cannot see (it would train on the CPU instead),
    unless CPU_FOR_UNSEEN_GPU_ENV says to (a fake GPU node)."""
    import ray
    import torch

    refusal = granted_gpu_refusal(ray.get_gpu_ids(), torch.cuda.is_available())
    if refusal is not None and os.environ.get(CPU_FOR_UNSEEN_GPU_ENV) != "1":
        raise RuntimeError(refusal)

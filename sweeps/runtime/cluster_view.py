"""What a sweep's placement is decided on: the cluster as it is and as it can become.

The nodes that are up (Ray's own list), and where the cluster's autoscaler has told Ray which
node types it can add and how many of each (KubeRay's worker groups, the cluster launcher's
``available_node_types``), those too: a GPU group that starts at 0 replicas still has GPUs
to offer. Before the driver starts its local Ray: this machine (its CPUs, the GPUs torch
sees).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeKind:
    """Nodes of one shape: ``count`` of them up now, ``most`` at most (the autoscaler's)."""

    cpus: float
    gpus: float
    count: int
    most: int


@dataclass(frozen=True)
class ClusterView:
    """The cluster's node shapes (``kinds``), where it was read (``source``), and whether the
    driver starts this Ray itself (``local``: one machine, the sweep's own)."""

    kinds: tuple[NodeKind, ...]
    source: str
    local: bool = False

    def total(self, what: str, *, most: bool = False) -> float:
        """CPUs or GPUs (``what``) of the nodes up, or with ``most`` of every node the
        cluster can have."""
        return sum(getattr(k, what) * (k.most if most else k.count) for k in self.kinds)

    @property
    def can_add_gpus(self) -> bool:
        return self.total("gpus", most=True) > self.total("gpus")

    def cpus_on(self, *, gpu_nodes: bool) -> float:
        """CPUs (at most) of the nodes with GPUs, or of those without."""
        return sum(k.cpus * k.most for k in self.kinds if (k.gpus > 0) == gpu_nodes)

    def describe(self) -> str:
        now = f"{self.total('cpus'):g} CPUs, {self.total('gpus'):g} GPUs up"
        if self.total("cpus", most=True) > self.total("cpus") or self.can_add_gpus:
            most = f"{self.total('cpus', most=True):g} CPUs, {self.total('gpus', most=True):g}"
            return f"{now}; up to {most} GPUs with the autoscaler's node types"
        return now

    def to_state(self) -> dict:
        kinds = [[k.cpus, k.gpus, k.count, k.most] for k in self.kinds]
        return {"kinds": kinds, "source": self.source, "local": self.local}

    @classmethod
    def from_state(cls, state: dict) -> ClusterView:
        kinds = tuple(NodeKind(*map(float, k[:2]), *map(int, k[2:])) for k in state["kinds"])
        return cls(kinds, str(state["source"]), bool(state.get("local", False)))


def this_machine() -> ClusterView:
    """The local Ray the driver will start: this machine's CPUs and the GPUs torch sees."""
    gpus = 0
    if not plainly_without_gpus():
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    kind = NodeKind(float(os.cpu_count() or 1), float(gpus), 1, 1)
    return ClusterView((kind,), "this machine", local=True)


def read_cluster(local: bool = False) -> ClusterView:
    """The cluster Ray is connected to (``local``: the one the driver started): its nodes up,
    and the node types its autoscaler reported (``sweeps.cluster.tunefix``), if any."""
    import ray

    from sweeps.cluster import tunefix

    shapes: dict[tuple[float, float], int] = {}
    for node in ray.nodes():
        if node.get("Alive"):
            resources = node.get("Resources", {})
            shape = (float(resources.get("CPU", 0)), float(resources.get("GPU", 0)))
            shapes[shape] = shapes.get(shape, 0) + 1
    kinds = {shape: NodeKind(*shape, count, count) for shape, count in shapes.items()}
    types = None if local else tunefix.autoscaler_node_types()
    for cpus, gpus, most in types or []:
        up = kinds.get((cpus, gpus))
        count = up.count if up else 0
        kinds[(cpus, gpus)] = NodeKind(cpus, gpus, count, max(most, count))
    source = "the nodes up and the autoscaler's node types" if types else "the nodes up"
    return ClusterView(tuple(kinds.values()), source, local)


def plainly_without_gpus() -> bool:
    """Whether this machine has no GPU torch could use, told without importing torch (3 s of a
    sweep's start on 2 cores; the driver needs torch for nothing else): Linux without NVIDIA's,
    AMD's (ROCm) or WSL's device files, or macOS (torch.cuda has no device there). Elsewhere
    torch is asked."""
    if sys.platform == "darwin":
        return True
    if not sys.platform.startswith("linux"):
        return False
    devices = Path("/dev")
    return not (
        any(devices.glob("nvidia*")) or (devices / "kfd").exists() or (devices / "dxg").exists()
    )

"""Where a trial trains: the GPU share ``sweep.resources.gpu: auto`` resolves to, decided on the
driver from the cluster, and the one-line refusals when a GPU is asked for and none is there.

A trial with ``train.device: auto`` trains on CUDA when Ray grants it a GPU share (Ray hides
the GPUs from a trial that reserves none, ``sweeps.runtime.driver.QUIET_WARNINGS``), in the
precision the spec asks for there (``arith.training.hardware.resolved_precision``); on a
cluster without GPUs the share is 0 and the trial trains on the CPU as before."""

from __future__ import annotations

import math
import os

GPU_AUTO_RULE = (
    "0 without GPUs in the cluster or with train.device=cpu; else with G GPUs and C trials "
    "at once (sweep.max_concurrent, or the cluster's CPUs / sweep.resources.cpu), "
    "min(1, G/C) rounded down to 1/k: 1/ceil(C/G)"
)


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


def cluster_resources() -> dict[str, float]:
    """The cluster's CPUs and GPUs: Ray's own count once Ray is up (a cluster connected to, or
    a local Ray started); before the driver's local Ray starts, what it will find here (the
    CPUs it is started with, and the GPUs torch sees)."""
    import ray

    if ray.is_initialized():
        found = ray.cluster_resources()
        return {"CPU": found.get("CPU", 0.0), "GPU": found.get("GPU", 0.0)}
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


def train_device(spec) -> str:
    """The base config's ``train.device`` (``auto`` unless the spec names one)."""
    return str(spec.base.get("train", {}).get("device", "auto"))


def resolved_gpu(spec, cluster: dict[str, float] | None = None) -> float:
    """The GPU share each trial (or pack) holds: ``sweep.resources.gpu``, or for ``auto`` the
    share by ``GPU_AUTO_RULE`` on ``cluster`` (by default ``cluster_resources()``)."""
    s = spec.sweep
    if s.resources.gpu != "auto":
        return float(s.resources.gpu)
    if train_device(spec).split(":")[0] == "cpu":
        return 0.0
    cluster = cluster_resources() if cluster is None else cluster
    concurrent = s.max_concurrent or int(cluster.get("CPU", 1) // max(s.resources.cpu, 1e-9))
    return gpu_share(cluster.get("GPU", 0.0), concurrent)


def gpu_refusal(spec, cluster: dict[str, float] | None = None) -> str | None:
    """One line when the sweep asks for a GPU the cluster does not have (a share > 0, or
    ``train.device: cuda``), else None; checked before any trial starts."""
    cluster = cluster_resources() if cluster is None else cluster
    if cluster.get("GPU", 0.0) > 0:
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
    line when Ray granted a GPU that torch cannot see (it would train on the CPU instead)."""
    import ray
    import torch

    refusal = granted_gpu_refusal(ray.get_gpu_ids(), torch.cuda.is_available())
    if refusal is not None:
        raise RuntimeError(refusal)

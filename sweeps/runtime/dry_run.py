"""What ``python -m sweeps.run --dry-run`` prints: the trials a sweep would run, with sizes and
estimated training FLOPs, for a packed sweep which trials share one process, then where its
outputs and MLflow runs would go, how many trials run at once here and an estimate of how long
it would take on this machine (``sweeps.runtime.wall_estimate``). Nothing starts: no Ray, no
MLflow, no folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from sweeps.spec.sweep_spec import SweepSpec


def dry_run_text(
    spec: SweepSpec,
    out_dir: Path | None = None,
    tracking_uri: str | None = None,
    address: str | None = None,
) -> str:
    """The trials a sweep would run, with sizes and estimated training FLOPs, and where and
    how it would run (``out_dir``, ``tracking_uri``; ``address``: a cluster's, which then
    decides how many trials run at once). Nothing starts."""
    from arith.training.cost import describe
    from sweeps.spec.space import n_trials, resolve_run_config, tune_ordered_points

    s = spec.sweep
    lines = [
        f"sweep {spec.name}: search={s.search} metric={s.metric} ({s.mode}) "
        f"scheduler={s.scheduler.name} num_samples={s.num_samples}"
    ]
    sampled = _sampled(spec)
    for dim in sampled:
        lines.append(f"  sampled {dim.key}: {dim.describe()}")
    for path, rule in spec.derived.items():
        lines.append(f"  derived {path} = {rule.expression}")
    points = tune_ordered_points(spec)
    numbered = "" if s.search == "optuna" else ", numbered as Tune's trial ids end (_00000)"
    lines.append(
        f"{n_trials(spec)} trials ({len(points)} grid points x {s.num_samples} samples{numbered}):"
    )
    total_flops = 0.0
    for i, point in enumerate(points):
        low = {d.key: d.values[0] for d in sampled}
        cfg = resolve_run_config(spec.base, {**point, **low}, spec.derived)
        size = describe(cfg)
        total_flops += size["total_flops"] * s.num_samples
        shown = {**point, **{p: cfg.flat()[p] for p in spec.derived}}
        lines.append(
            f"  {_trial_numbers(i, len(points), s.num_samples)}  {format_point(shown)}  "
            f"n_params={size['n_params']:,}  steps={size['steps']:,}  "
            f"flops~{size['total_flops']:.2e}"
        )
    note = " (sampled axes at their first value)" if sampled else ""
    lines.append(f"estimated training FLOPs in all: {total_flops:.2e}{note}")
    lines.append(_resources_line(spec))
    if s.pack != 1:
        lines += _pack_lines(spec)
    if out_dir is not None and tracking_uri is not None:
        lines += _where_lines(spec, out_dir, tracking_uri)
    lines += _how_long_lines(spec, address)
    return "\n".join(lines)


def _sampled(spec: SweepSpec) -> list:
    """The space's sampled dimensions (a dry run shows their first value)."""
    grid = spec.sweep.search == "grid"
    return [d for d in spec.space.values() if not (d.is_grid and grid)]


def _resources_line(spec: SweepSpec) -> str:
    """What each trial (or pack) holds; for ``gpu: auto``, whether this machine gives it any
    (the share itself is decided when the sweep starts: ``sweeps.runtime.placement``)."""
    r = spec.sweep.resources
    if r.gpu != "auto":
        return f"resources per trial: cpu {r.cpu:g}, gpu {r.gpu:g}"
    gpus = this_machine()["GPU"]
    gpu = f"auto (a share of the {gpus:g} GPUs here, decided at the start)" if gpus else (
        "auto (0 here: no GPU)")  # fmt: skip
    return f"resources per trial: cpu {r.cpu:g}, gpu {gpu}"


def this_machine() -> dict[str, float]:
    """The CPUs and GPUs the local Ray a sweep starts here will find (os.cpu_count(), and the
    GPUs torch sees), without starting it."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


def _where_lines(spec: SweepSpec, out_dir: Path, tracking_uri: str) -> list[str]:
    """Where the outputs and the MLflow runs would go (a password in the URI masked)."""
    from sweeps.analysis.store import masked
    from sweeps.tracking.writer import artifact_root

    artifacts = artifact_root(tracking_uri)  # a file: URI beside a SQLite store
    beside = f"; artifacts in {url2pathname(urlsplit(artifacts).path)}" if artifacts else ""
    return [
        f"outputs:        {out_dir} (tables, plots, models, Ray's checkpoints under ray/)",
        f"mlflow:         {masked(tracking_uri)} (experiment {spec.name!r}{beside})",
    ]


def _how_long_lines(spec: SweepSpec, address: str | None) -> list[str]:
    """How many trials run at once here, and how long the sweep would take (an estimate)."""
    from sweeps.runtime.wall_estimate import duration, estimate_wall

    if address:
        return [f"at once:        as many trials as the cluster at {address} holds (not known "
                "before it is reached); no estimate of the time"]  # fmt: skip
    at_once, why = trials_at_once(spec)
    units, device = tune_units(spec)
    threads = max(1, int(spec.sweep.resources.cpu))
    estimate = estimate_wall(units, min(at_once, len(units)), device, threads)
    if estimate.seconds is None:
        how_long = f"not estimated: {estimate.why}"
    else:
        how_long = f"{duration(estimate.seconds)} on this machine (an estimate: {estimate.why})"
    return [f"at once:        {at_once} trial(s) ({why})", f"estimated time: {how_long}"]


def trials_at_once(spec: SweepSpec) -> tuple[int, str]:
    """How many trials (packs) the local Ray of this machine runs at once, and why (``gpu:
    auto`` shares the GPUs among the trials the CPUs and the cap allow)."""
    s = spec.sweep
    here = this_machine()
    limits = {f"{here['CPU']:g} CPUs here, {s.resources.cpu:g} a trial":
              int(here["CPU"] // s.resources.cpu)}  # fmt: skip
    if s.resources.gpu != "auto" and s.resources.gpu > 0:
        gpus = f"{here['GPU']:g} GPUs here, {s.resources.gpu:g} a trial"
        limits[gpus] = int(here["GPU"] // s.resources.gpu)
    if s.max_concurrent:
        limits[f"sweep.max_concurrent {s.max_concurrent}"] = s.max_concurrent
    why, count = min(limits.items(), key=lambda item: item[1])
    return max(1, count), why


def tune_units(spec: SweepSpec) -> tuple[list[tuple[float, str]], str]:
    """Each Tune trial's (training FLOPs, precision) in Tune's order (a pack's: its members'
    FLOPs together), and the device they train on here (sampled axes at their first value)."""
    from arith.training.cost import describe
    from arith.training.device import pick_device, resolved_precision
    from sweeps.runtime.tune_space import build_packs
    from sweeps.spec.space import resolve_run_config, tune_ordered_points

    s = spec.sweep
    low = {d.key: d.values[0] for d in _sampled(spec)}
    if s.pack != 1:
        groups = [[m.point for m in pack] for pack in build_packs(spec)]
    else:
        groups = [[point] for point in tune_ordered_points(spec)] * s.num_samples
    units, device = [], "cpu"
    for group in groups:
        configs = [resolve_run_config(spec.base, {**p, **low}, spec.derived) for p in group]
        first = configs[0]
        device = pick_device(first.train.device).type
        precision = resolved_precision(pick_device(first.train.device), first.train.precision,
                                       first.model.d_model)  # fmt: skip
        units.append((sum(describe(c)["total_flops"] for c in configs), precision))
    return units, device


def _pack_lines(spec: SweepSpec) -> list[str]:
    """The packs a packed sweep trains: which trials (by their ids' ends) share one process."""
    from arith.training.cost import describe
    from sweeps.runtime.tune_space import build_packs
    from sweeps.spec.space import resolve_run_config

    packs = build_packs(spec)
    n = sum(len(p) for p in packs)
    lines = [f"{len(packs)} packs (sweep.pack={spec.sweep.pack}) train these {n} trials:"]
    for k, pack in enumerate(packs):
        numbers = ",".join(f"{m.index:05d}" for m in pack)
        config = resolve_run_config(spec.base, pack[0].point, spec.derived)
        mib = len(pack) * describe(config)["train_bytes"] / 2**20
        lines.append(f"  pack {k}: {len(pack)} trial(s) {numbers} (training memory ~{mib:.0f} MiB)")
    return lines


def _trial_numbers(i: int, n_points: int, n_samples: int) -> str:
    """``00003``, or with repeats ``00003,00007,...`` (repeat r of point i is trial r*n+i)."""
    numbers = [f"{r * n_points + i:05d}" for r in range(min(n_samples, 3))]
    return ",".join(numbers) + (",..." if n_samples > 3 else "")


def format_point(point: dict[str, Any]) -> str:
    if not point:
        return "(base config)"
    return " ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()
    )

"""What ``python -m sweeps.run --dry-run`` prints: the trials a sweep would run, with sizes and
estimated training FLOPs, and for a packed sweep which trials share one process. Nothing starts:
no Ray, no MLflow."""

from __future__ import annotations

from typing import Any

from sweeps.spec.sweep_spec import SweepSpec


def dry_run_text(spec: SweepSpec) -> str:
    """The trials a sweep would run, with sizes and estimated training FLOPs (nothing starts)."""
    from arith.training.cost import describe
    from sweeps.spec.space import n_trials, resolve_run_config, tune_ordered_points

    s = spec.sweep
    lines = [
        f"sweep {spec.name}: search={s.search} metric={s.metric} ({s.mode}) "
        f"scheduler={s.scheduler.name} num_samples={s.num_samples}"
    ]
    sampled = [d for d in spec.space.values() if not (d.is_grid and s.search == "grid")]
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
    return "\n".join(lines)


def _resources_line(spec: SweepSpec) -> str:
    """What each trial (or pack) holds; ``gpu: auto`` by its rule, as the cluster is not known."""
    from sweeps.runtime.placement import GPU_AUTO_RULE

    r = spec.sweep.resources
    if r.gpu == "auto":
        gpu = f"auto: a GPU share per trial decided when the cluster is known: {GPU_AUTO_RULE}"
    else:
        gpu = f"{r.gpu:g}"
    return f"resources per trial: cpu {r.cpu:g}, gpu {gpu}"


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

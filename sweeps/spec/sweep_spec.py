"""The search-space file as validated data: the ``sweep``, ``base``, ``space``, ``derived`` and
``table`` blocks.

A spec is checked completely before anything starts (no Ray, no MLflow run), and every mistake is
one line naming its dotted path and the bad value, e.g.
``space.model.d_model: expected a non-empty list of values, but got []``::

    sweep: {name: width_vs_depth, metric: val/exact_match, mode: max, search: grid}
    base: {task: {name: addition, n_digits: 3}, train: {max_steps: 500}}
    space: {model.d_model: [64, 128], model.n_layer: [2, 4]}
    derived: {optim.lr: "1e-3 * sqrt(train.batch_size / 32)"}
    table: {rows: [model.d_model], columns: [model.n_layer], values: [test/exact_match]}

Here: the checks across blocks (the space against the run config, the metrics every table and
the search need). Reading the file and its ``--set`` overrides: ``sweeps.spec.spec_file``; the
``sweep:`` block's dataclasses and the checks of its own values: ``sweeps.spec.settings``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any

import yaml

from arith import dataconf
from arith.errors import ConfigError, require
from arith.training.reported import SUMMARY_KEYS
from sweeps.spec.metrics import FINAL_NAMESPACES
from sweeps.spec.settings import SweepSettings, check_settings
from sweeps.spec.space import Derived, Dimension, parse_derived, parse_dimension
from sweeps.spec.spec_file import BLOCKS, SpecError, apply_overrides, read_yaml

# Metrics train() reports only once, at the end: a scheduler or a model-based searcher that
# decides on intermediate results cannot use them.
FINAL_ONLY_PREFIXES = tuple(f"{namespace}/" for namespace in FINAL_NAMESPACES)


@dataclass(frozen=True)
class SweepSpec:
    """A validated search-space file."""

    sweep: SweepSettings
    base: dict[str, Any]
    space: dict[str, Dimension]
    derived: dict[str, Derived]
    tables: tuple[Any, ...]  # sweeps.spec.table_block.TableSpec
    raw: dict[str, Any]  # the spec as run (after --set), for the MLflow artifact

    @property
    def name(self) -> str:
        return self.sweep.name

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.raw, sort_keys=False)


def load_spec(path: str | Path, overrides: list[str] = ()) -> SweepSpec:
    """Read, override and validate a spec file; raises SpecError (one line) on any mistake."""
    raw = apply_overrides(read_yaml(path), list(overrides))
    return parse_spec(raw)


def parse_spec(raw: dict[str, Any]) -> SweepSpec:
    """Validate plain data into a SweepSpec (see the module docstring)."""
    try:
        return _parse(raw)
    except SpecError:
        raise
    except ConfigError as err:
        raise SpecError(err.path, err.message) from None
    except OverflowError as err:  # arith.dataconf: float(10**400) (its path is not known here)
        raise SpecError("spec", f"a number is out of range: {err}") from None


def _parse(raw: dict[str, Any]) -> SweepSpec:
    from arith.config import RunConfig

    unknown = sorted(set(raw) - set(BLOCKS), key=str)
    require(not unknown, str(unknown[0]) if unknown else "", f"unknown block; allowed: {BLOCKS}")
    require("sweep" in raw, "sweep", "missing; a spec needs at least sweep.name")
    sweep = dataconf.from_dict(SweepSettings, raw["sweep"], "sweep")
    check_settings(sweep)
    base = {} if raw.get("base") is None else raw["base"]  # `base: 0` is a mistake, not {}
    require(isinstance(base, dict), "base", f"expected a mapping, but got {base!r}")
    paths = dataconf.field_paths(RunConfig)
    space = _mapping(raw, "space")
    space = {k: parse_dimension(f"space.{k}", k, v, paths) for k, v in space.items()}
    derived = _mapping(raw, "derived")
    derived = {k: parse_derived(f"derived.{k}", k, v, paths) for k, v in derived.items()}
    _check_overlap(space, derived, sweep)
    _check_sampled_types(space)
    _check_repeats(space, derived, sweep)
    tables = _parse_tables(raw.get("table"), paths)
    spec = SweepSpec(sweep, base, space, derived, tables, raw)
    from sweeps.spec.space import validation_points

    metrics = _check_configs(spec, validation_points(spec))
    _check_metrics(spec, metrics)
    return spec


def _mapping(raw: dict[str, Any], block: str) -> dict[str, Any]:
    value = {} if raw.get(block) is None else raw[block]
    require(isinstance(value, dict), block, f"expected a mapping, but got {value!r}")
    return value


def _check_sampled_types(space: dict[str, Dimension]) -> None:
    """uniform and loguniform draw floats: on an integer field every trial would fail after
    Ray started (``expected int, but got 37.3``)."""
    from arith.config import RunConfig

    for key, dim in space.items():
        if dim.kind not in ("uniform", "loguniform"):
            continue
        accepted = _field_types(RunConfig, key)
        require(
            float in accepted,
            f"space.{key}.{dim.kind}",
            f"draws floats, but {key} takes {' or '.join(_type_name(t) for t in accepted)}; "
            "use {randint: [lo, hi]} or a list of values",
        )


def _field_types(cls: type, path: str) -> tuple[type, ...]:
    """The types a dotted config field accepts (``int | None`` -> (int, NoneType))."""
    import typing

    tp: Any = cls
    for name in path.split("."):
        tp = typing.get_type_hints(tp)[name]
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, UnionType) else (tp,)


def _type_name(tp: Any) -> str:
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _check_repeats(space: dict[str, Dimension], derived: dict, s: SweepSettings) -> None:
    """Grid repeats (``num_samples > 1``) redraw only sampled axes: with none, every repeat
    trains the very configs and seeds of the first, and a table would count each run n times
    (its spread shrunk, not measured)."""
    if s.search != "grid" or s.num_samples == 1:
        return
    if any(not dim.is_grid for dim in space.values()):
        return
    seeds = list(s.seeds) if s.seeds is not None else None
    if seeds is None and "train.seed" not in derived:
        seeds = next((list(d.values) for k, d in space.items() if k == "train.seed"), None)
    more = list(range(s.num_samples * len(seeds))) if seeds else list(range(s.num_samples))
    require(
        False,
        "sweep.num_samples",
        f"{s.num_samples} repeats of a grid with no sampled axis train the same configs and "
        f"seeds {s.num_samples} times; use sweep.seeds: {more} and num_samples: 1",
    )


def _check_overlap(space: dict, derived: dict, sweep: SweepSettings) -> None:
    searched: set[str] = set()
    for key, dim in space.items():
        for path in dim.paths:
            require(path not in searched, f"space.{key}", f"{path} is searched by another key too")
            searched.add(path)
    for path in derived:
        require(path not in searched, f"derived.{path}", "is also searched in space; keep one")
    if sweep.seeds is not None:
        require(
            "train.seed" not in searched and "train.seed" not in derived,
            "sweep.seeds",
            "repeats over train.seed, which space or derived also sets; keep one",
        )


def _parse_tables(value: Any, paths: set[str]) -> tuple[Any, ...]:
    """The ``table:`` block through its one parser (sweeps.spec.table_block), then the checks that
    need the run config: every key a table groups or selects by is a config path or a summary
    column."""
    from sweeps.spec.table_block import table_specs_from_block

    try:
        tables = table_specs_from_block(value)
    except ValueError as err:
        where, _, message = str(err).partition(": ")
        raise SpecError(where, message) from None
    for i, table in enumerate(tables):
        where = f"table[{i}]" if isinstance(value, list) else "table"
        keys = {"rows": table.rows, "columns": table.columns}
        keys["select.over"] = table.select.over if table.select is not None else ()
        for key, names in keys.items():
            for j, path in enumerate(names):
                require(
                    path in paths or path in SUMMARY_KEYS,
                    f"{where}.{key}[{j}]",
                    f"expected a config path or a summary column, but got {path!r}",
                )
        x = table.fit.x if table.fit is not None else None
        require(
            x is None or x in paths or x in SUMMARY_KEYS,
            f"{where}.fit.x",
            f"expected a config path or a summary column (n_params, tokens, flops, ...), "
            f"but got {x!r}",
        )
    return tuple(tables)


def _check_configs(spec: SweepSpec, points: list[dict[str, Any]]) -> set[str]:
    """Build the RunConfig of each validation point; return every metric name they report."""
    from arith.training.reported import reported_metrics
    from sweeps.spec.space import resolve_run_config

    metrics: set[str] = set()
    for point in points:
        try:
            cfg = resolve_run_config(spec.base, point, spec.derived)
        except ConfigError as err:
            where = _blame(err.path, spec)
            if where.startswith("base") and _base_error(spec) == (err.path, err.message):
                raise SpecError(where, err.message) from None  # no trial is to blame
            raise SpecError(where, _with_point(err.message, point)) from None
        metrics |= reported_metrics(cfg)
        _check_device(cfg.train.device, spec.sweep.resources.gpu, point)
        _check_max_t(cfg, spec.sweep, point)
    return metrics


def _check_max_t(cfg, s: SweepSettings, point: dict[str, Any]) -> None:
    """ASHA stops every trial at its ``max_t``-th report: below the reports a whole trial
    makes, the survivors end cut short, without their test figures."""
    from arith.training.cost import planned_steps

    if s.scheduler.name != "asha":
        return
    # An evaluation at step 0, every eval_every steps and at the end, then the summary.
    reports = 1 + math.ceil(planned_steps(cfg) / cfg.train.eval_every) + 1
    require(
        s.scheduler.max_t >= reports,
        "sweep.scheduler.max_t",
        _with_point(
            f"{s.scheduler.max_t} stops a trial at its {s.scheduler.max_t}th report, before "
            f"its end: a trial reports {reports} times (an evaluation at step 0 and every "
            f"train.eval_every steps, then its summary); set max_t to {reports}",
            point,
        ),
    )


def _check_device(device: str, gpu: float | str, point: dict[str, Any]) -> None:
    """A trial's device agrees with what it reserves: Ray hides the GPUs from a trial that
    reserves none, and a GPU reserved for a CPU trial sits idle. ``gpu: auto`` agrees with any
    device (``sweeps.runtime.placement``: 0 for cpu, a refusal for cuda without GPUs)."""
    if gpu == "auto":
        return
    kind = device.split(":")[0]
    require(
        not (kind == "cpu" and gpu > 0),
        "sweep.resources.gpu",
        _with_point(f"{gpu} reserves a GPU that train.device=cpu never uses; set 0", point),
    )
    require(
        not (kind == "cuda" and gpu == 0),
        "sweep.resources.gpu",
        _with_point(
            f"0 hides every GPU from a trial, but train.device={device}; reserve a share "
            "(e.g. 0.5) or set train.device to auto",
            point,
        ),
    )


def _base_error(spec: SweepSpec) -> tuple[str, str] | None:
    """The (path, message) of the base config's own mistake, read with no point and no derived
    value, or None: a mistake the base makes alone is the base's, whatever trial met it."""
    from sweeps.spec.space import resolve_run_config

    try:
        resolve_run_config(spec.base, {}, {})
    except ConfigError as err:
        return err.path, err.message
    return None


def _blame(path: str, spec: SweepSpec) -> str:
    """The spec block a bad config value came from."""
    if path in spec.derived:
        return f"derived.{path}"
    for key, dim in spec.space.items():
        if path in dim.paths:
            return f"space.{key}"
    return f"base.{path}" if path and path != "config" else "base"


def _with_point(message: str, point: dict[str, Any]) -> str:
    return f"{message} (trial {point})" if point else message


def _check_metrics(spec: SweepSpec, metrics: set[str]) -> None:
    s = spec.sweep
    require(
        s.metric in metrics,
        "sweep.metric",
        f"{s.metric!r} is never reported for this base config; known: {_some(metrics)}",
    )
    decides_early = s.search == "optuna" or s.scheduler.name == "asha"
    require(
        not (decides_early and s.metric.startswith(FINAL_ONLY_PREFIXES)),
        "sweep.metric",
        f"{s.metric!r} is only measured at the end, but {s.search}/{s.scheduler.name} decide on "
        "intermediate reports; use a val/* or train/* metric",
    )
    for i, table in enumerate(spec.tables):
        where = f"table[{i}]" if isinstance(spec.raw.get("table"), list) else "table"
        for j, value in enumerate(table.values):
            require(
                value in metrics or value in SUMMARY_KEYS,
                f"{where}.values[{j}]",
                f"{value!r} is never reported for this base config; known: {_some(metrics)}",
            )
        y = table.fit.y if table.fit is not None else None
        require(
            y is None or y in metrics or y in SUMMARY_KEYS,
            f"{where}.fit.y",
            f"{y!r} is never reported for this base config; known: {_some(metrics)}",
        )
        by = table.select.by if table.select is not None else None
        require(
            by is None or by in metrics or by in SUMMARY_KEYS,
            f"{where}.select.by",
            f"{by!r} is never reported for this base config; known: {_some(metrics)}",
        )


def _some(metrics: set[str]) -> str:
    names = sorted(m for m in metrics if "/" in m)
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")

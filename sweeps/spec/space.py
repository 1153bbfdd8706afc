"""The spec's search space: dimensions, derived values, the grid and the trials it holds.

Tune's counterparts (param space, searcher, scheduler) are built in sweeps.runtime.tune_space.

A trial's config (what Tune samples) is flat: dotted config path -> value, for instance
``{"model.d_model": 128, "train.seed": 1}``. ``resolve_run_config`` turns it into the arith
``RunConfig`` of that trial: base config, then the trial's values, then derived values.

A space key may join paths with commas to search them together (a list of tuples)::

    space:
      "model.d_model,model.n_layer": [[512, 2], [256, 4], [128, 8]]   # width vs depth pairs
"""

from __future__ import annotations

import ast
import copy
import itertools
import math
import operator
from dataclasses import dataclass
from typing import Any

from arith import dataconf
from arith.errors import ConfigError, require

DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")
# Validation builds at most this many grid points' configs; larger grids are spot-checked.
MAX_VALIDATION_POINTS = 256


@dataclass(frozen=True)
class Dimension:
    """One searched axis: a grid list, or a distribution (``kind`` in DISTRIBUTIONS)."""

    key: str  # as written: "model.d_model" or "model.d_model,model.n_layer"
    kind: str  # "grid" or one of DISTRIBUTIONS
    values: tuple[Any, ...]  # grid / choice values, or (lo, hi)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(self.key.split(","))

    @property
    def is_grid(self) -> bool:
        return self.kind == "grid"

    def describe(self) -> str:
        if self.kind in ("grid", "choice"):
            return f"{self.kind} {list(self.values)}"
        return f"{self.kind}({self.values[0]}, {self.values[1]})"


def _nearest(path: str, paths: set[str]) -> str:
    """`` did you mean model.n_layer?`` for a path mistyped, else an example of a path."""
    close = dataconf.did_you_mean(path, sorted(paths), cutoff=0.75)
    return close or " e.g. model.d_model, optim.lr"


def parse_dimension(where: str, key: str, value: Any, paths: set[str]) -> Dimension:
    """A space entry: ``[v1, v2]`` or ``{loguniform: [lo, hi]}`` (see the module docstring)."""
    parts = key.split(",")
    for part in parts:
        require(part in paths, where, f"{part!r} is not a config path;{_nearest(part, paths)}")
    if isinstance(value, list):
        require(len(value) > 0, where, "expected a non-empty list of values, but got []")
        values = tuple(value)
        kind = "grid"
    elif isinstance(value, dict) and len(value) == 1:
        kind, args = next(iter(value.items()))
        require(kind in DISTRIBUTIONS, where, f"expected one of {DISTRIBUTIONS}, but got {kind!r}")
        values = _distribution_args(f"{where}.{kind}", kind, args)
    else:
        raise ConfigError(
            where, f"expected a list or {{{'|'.join(DISTRIBUTIONS)}: ...}}, got {value!r}"
        )
    if len(parts) > 1:
        require(kind in ("grid", "choice"), where, "joined paths need a list of tuples")
        for i, item in enumerate(values):
            require(
                isinstance(item, list) and len(item) == len(parts),
                f"{where}[{i}]",
                f"expected a list of {len(parts)} values ({key}), but got {item!r}",
            )
    return Dimension(key, kind, values)


def _distribution_args(where: str, kind: str, args: Any) -> tuple[Any, ...]:
    if kind == "choice":
        require(isinstance(args, list) and args, where, f"expected a non-empty list, got {args!r}")
        return tuple(args)
    ok = isinstance(args, list) and len(args) == 2
    ok = ok and all(isinstance(a, int | float) and not isinstance(a, bool) for a in args)
    require(ok, where, f"expected [lo, hi] numbers, but got {args!r}")
    lo, hi = args
    require(lo < hi, where, f"expected lo < hi, but got [{lo}, {hi}]")
    if kind == "loguniform":
        require(lo > 0, where, f"expected lo > 0 for a log scale, but got [{lo}, {hi}]")
    if kind == "randint":
        require(
            isinstance(lo, int) and isinstance(hi, int),
            where,
            f"expected integers [lo, hi) (hi excluded), but got [{lo}, {hi}]",
        )
    return (lo, hi)


# ---- derived values: a whitelisted expression over config paths ----------------------------

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: lambda base, exp: _power(base, exp),
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
# Comparisons, for a value that depends on a condition:
# ``train.precision: "'bf16' if model.d_model >= 64 else 'fp32'"``.
_COMPARE = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}  # fmt: skip
# The nodes that only hold an expression together: names, the condition, and/or.
_STRUCTURE = (
    ast.Expression, ast.Load, ast.Name, ast.Attribute, ast.IfExp, ast.BoolOp, ast.And, ast.Or
)  # fmt: skip


def _power(base: float, exp: float) -> float:
    """``**`` in floating point: as integers, ``32 ** 10 ** 10`` would compute for hours (and
    a spec is untrusted input); in floats it overflows at once, which is one error line."""
    result = float(base) ** float(exp)
    exact = isinstance(base, int) and isinstance(exp, int) and exp >= 0 and abs(result) < 2**53
    return int(result) if exact else result


_FUNCTIONS = {"sqrt": math.sqrt, "log": math.log, "exp": math.exp, "min": min, "max": max}


@dataclass(frozen=True)
class Derived:
    """``optim.lr: "3e-4 * sqrt(train.batch_size / 32)"`` (seed 003's sqrt batch scaling)."""

    path: str
    expression: str

    @property
    def references(self) -> set[str]:
        return _references(ast.parse(self.expression, mode="eval"))

    def evaluate(self, flat: dict[str, Any]) -> float | int | str:
        return _eval(ast.parse(self.expression, mode="eval").body, flat, self.expression)


def parse_derived(where: str, path: str, expression: Any, paths: set[str]) -> Derived:
    require(path in paths, where, f"{path!r} is not a config path;{_nearest(path, paths)}")
    if isinstance(expression, int | float) and not isinstance(expression, bool):
        expression = repr(expression)
    require(
        isinstance(expression, str), where, f"expected an expression string, got {expression!r}"
    )
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ConfigError(where, f"cannot parse expression {expression!r}") from None
    bad = _first_disallowed(tree)
    require(bad is None, where, f"{bad} is not allowed in {expression!r}")
    for ref in sorted(_references(tree)):
        require(ref in paths, where, f"{ref!r} in {expression!r} is not a config path")
    return Derived(path, expression)


def _first_disallowed(tree: ast.AST) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, _STRUCTURE):
            continue
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float | str):
                return f"the constant {node.value!r}"
        elif isinstance(node, ast.Compare):
            bad = [type(op).__name__ for op in node.ops if type(op) not in _COMPARE]
            if bad:
                return f"the comparison {bad[0]}"
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                return f"the operator {type(node.op).__name__}"
            sides = [side for side in (node.left, node.right) if isinstance(side, ast.Constant)]
            if any(isinstance(side.value, str) for side in sides):
                return "arithmetic on text"
        elif isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                return f"the operator {type(node.op).__name__}"
        elif isinstance(node, ast.Call):
            ok = (
                isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS and not node.keywords
            )
            if not ok:
                return f"a call other than {', '.join(_FUNCTIONS)}"
        elif type(node) not in _BINARY and type(node) not in _UNARY and type(node) not in _COMPARE:
            return f"{type(node).__name__}"
    return None


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _references(tree: ast.AST) -> set[str]:
    refs: set[str] = set()
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(
            getattr(node, "ctx", None), ast.Store
        ):
            name = _dotted(node)
            if name:
                refs.add(name)
        elif isinstance(node, ast.Name) and id(node) not in called:
            refs.add(node.id)
    # Names inside attribute chains ("train" of "train.batch_size") are not references.
    return {r for r in refs if not any(o.startswith(r + ".") for o in refs)}


def _eval(node: ast.AST, flat: dict[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, flat, text), _eval(node.right, flat, text)
        if isinstance(left, str) or isinstance(right, str):  # 'a' * 10**9 would fill memory
            raise ConfigError("derived", f"cannot evaluate {text!r}: arithmetic on text")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, flat, text))
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](*(_eval(a, flat, text) for a in node.args))
    if isinstance(node, ast.IfExp):
        chosen = node.body if _eval(node.test, flat, text) else node.orelse
        return _eval(chosen, flat, text)
    if isinstance(node, ast.BoolOp):  # short-circuits as Python does
        values = (_eval(value, flat, text) for value in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, flat, text)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, flat, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    name = _dotted(node)
    if name is None or name not in flat:
        raise ConfigError("derived", f"cannot evaluate {text!r}: unknown name {name!r}")
    return flat[name]


# ---- trial configs ------------------------------------------------------------------------


def resolve_nested(
    base: dict[str, Any], point: dict[str, Any], derived: dict[str, Derived]
) -> dict[str, Any]:
    """The nested run-config dict of one trial: base, the trial's values, derived values."""
    from arith.config import from_dict

    nested = copy.deepcopy(base)
    for key, value in point.items():
        for path, item in zip(key.split(","), _unzip(key, value), strict=True):
            dataconf.set_dotted(nested, path, item)
    if derived:
        flat = from_dict(nested).flat()  # defaults included, so expressions may use them
        for path, rule in derived.items():
            try:
                value = rule.evaluate(flat)
            except (ArithmeticError, ValueError, TypeError) as err:
                raise ConfigError(path, f"{rule.expression!r} failed: {err}") from None
            dataconf.set_dotted(nested, path, value)
            flat[path] = value
    return nested


def resolve_run_config(base: dict[str, Any], point: dict[str, Any], derived: dict[str, Derived]):
    """The arith RunConfig of one trial (raises arith's ConfigError naming a dotted path)."""
    from arith.config import from_dict

    return from_dict(resolve_nested(base, point, derived))


def _unzip(key: str, value: Any) -> list[Any]:
    if "," in key:
        return list(value)
    return [value]


def grid_points(spec) -> list[dict[str, Any]]:
    """Every grid combination (grid lists and seeds); sampled axes are left out."""
    axes = _grid_axes(spec)
    combos = itertools.product(*axes.values())
    return [dict(zip(axes, combo, strict=True)) for combo in combos]


def tune_ordered_points(spec) -> list[dict[str, Any]]:
    """The grid points in the order Tune's variant generator creates trials, so that point i is
    the trial whose id ends in ``_{i:05d}`` (repeat r of it: ``_{r * len(points) + i:05d}``).
    Tune sorts the grid axes by name and varies the first fastest."""
    axes = _grid_axes(spec)
    names = sorted(axes)
    combos = itertools.product(*(axes[name] for name in reversed(names)))
    points = [dict(zip(reversed(names), combo, strict=True)) for combo in combos]
    return [{name: point[name] for name in axes} for point in points]  # keys in the spec's order


def _grid_axes(spec) -> dict[str, list[Any]]:
    axes: dict[str, list[Any]] = {}
    for key, dim in spec.space.items():
        if dim.is_grid and spec.sweep.search == "grid":
            axes[key] = list(dim.values)
    if spec.sweep.seeds is not None:
        axes["train.seed"] = list(spec.sweep.seeds)
    return axes


def n_trials(spec) -> int:
    """Trials the sweep will run (Tune: num_samples draws, each over the whole grid)."""
    return len(grid_points(spec)) * spec.sweep.num_samples


def validation_points(spec) -> list[dict[str, Any]]:
    """Trial points whose configs validation builds: the grid points (a spread of them when
    there are many) with sampled axes at their first value, then each sampled axis's other
    values (choices, the upper bound) one at a time."""
    grid = grid_points(spec)
    if len(grid) > MAX_VALIDATION_POINTS:
        stride = len(grid) / MAX_VALIDATION_POINTS
        grid = [grid[int(i * stride)] for i in range(MAX_VALIDATION_POINTS)] + [grid[-1]]
    sampled = {k: d for k, d in spec.space.items() if k not in grid[0]}
    points = [{**point, **{k: d.values[0] for k, d in sampled.items()}} for point in grid]
    for key, dim in sampled.items():
        others = list(dim.values[1:])
        if dim.kind == "randint":  # hi is excluded
            others = [dim.values[1] - 1] if dim.values[1] - 1 > dim.values[0] else []
        points += [{**points[0], key: value} for value in others]
    return points

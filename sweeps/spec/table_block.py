"""The ``table:`` block of a spec: which tables a sweep writes (rows, columns, values, an
aggregate), the best-per-cell ``select:`` and the ``fit:`` of each, parsed and checked here
(pure; ``sweeps.spec.sweep_spec`` adds the checks that need the run config).
``sweeps.analysis`` builds the tables and fits from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweeps.spec.metrics import held_out_message, is_fraction, is_held_out, metric_direction

if TYPE_CHECKING:
    import numpy as np

    from sweeps.analysis.power_law import PowerLawFit

AGGREGATES = ("mean_std", "mean", "max", "min", "median")
_SPEC_KEYS = ("name", "rows", "columns", "values", "aggregate", "select", "fit")
_SELECT_KEYS = ("over", "by", "mode")
MODES = ("min", "max")
LAWS = ("power",)
_FIT_KEYS = ("x", "y", "law", "per")


@dataclass(frozen=True)
class FitSpec:
    """A table's ``fit:``: which column is x, which is y, and the law."""

    x: str
    y: str
    law: str = "power"
    per: tuple[str, ...] | None = None
    """Table keys to fit separately by (one law per combination of their values); None: the
    table's row and column keys that x is not computed from (``group_keys``)."""

    def __post_init__(self) -> None:
        if isinstance(self.per, str):
            object.__setattr__(self, "per", (self.per,))
        elif self.per is not None:
            object.__setattr__(self, "per", tuple(self.per))
        for key in ("x", "y"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{key}: expected a column name, but got {value!r}")
        if self.law not in LAWS:
            raise ValueError(f"law: must be one of {', '.join(LAWS)}, but got {self.law!r}")

    @property
    def fits_error(self) -> bool:
        """A fraction of right answers (``sweeps.spec.metrics.is_fraction``) is fitted as its
        error ``1 - y``, which falls as the law does."""
        return is_fraction(self.y)

    @property
    def target(self) -> str:
        """The fitted quantity as written in the equation: ``test/loss`` or
        ``1 - test/exact_match``."""
        return f"1 - {self.y}" if self.fits_error else self.y

    def predict(self, fit: PowerLawFit, x: np.ndarray | float) -> np.ndarray:
        """The fitted curve in the units of y (undoing ``1 - y`` for a fraction)."""
        return 1 - fit.predict(x) if self.fits_error else fit.predict(x)


def check_block(
    item: object, path: str, allowed: tuple[str, ...], required: tuple[str, str], name: str
) -> None:
    """ValueError naming ``path`` (or ``path.<key>``) unless ``item`` is a mapping of ``allowed``
    keys holding both ``required`` ones (the ``select:`` and ``fit:`` blocks of a table)."""
    needs = " and ".join(required)
    if not isinstance(item, Mapping):
        raise ValueError(f"{path}: expected a mapping with {needs}, but got {item!r}")
    unknown = sorted(set(item) - set(allowed), key=str)
    if unknown:
        raise ValueError(f"{path}.{unknown[0]}: unknown key (allowed: {', '.join(allowed)})")
    for key in required:
        if key not in item:
            raise ValueError(f"{path}.{key}: missing ({name} needs {needs})")


def fit_spec_from_mapping(item: object, path: str) -> FitSpec | None:
    """``fit:`` as written (None when absent); errors are one line naming ``path.<key>``."""
    if item is None:
        return None
    check_block(item, path, _FIT_KEYS, ("x", "y"), "fit")
    per = item.get("per")
    if per is not None and not (
        isinstance(per, list) and all(isinstance(k, str) and k for k in per)
    ):
        raise ValueError(f"{path}.per: expected a list of table keys, but got {per!r}")
    try:
        return FitSpec(item["x"], item["y"], item.get("law", "power"), per)
    except ValueError as err:
        raise ValueError(f"{path}.{err}") from None


@dataclass(frozen=True)
class Selection:
    """Best-per-cell selection: keep the ``over`` values whose mean ``by`` is best in a cell."""

    over: tuple[str, ...]
    """Keys chosen per cell, e.g. ``("optim.lr",)``."""
    by: str
    """The metric that decides, averaged over the seeds of each choice; never a test metric."""
    mode: str | None = None
    """``min`` or ``max``; None: ``min`` for a metric whose name contains "loss", else ``max``."""

    def __post_init__(self) -> None:
        over = (self.over,) if isinstance(self.over, str) else tuple(self.over)
        object.__setattr__(self, "over", over)
        if not over:
            raise ValueError("over: must name at least one key, but got []")
        if not isinstance(self.by, str) or not self.by:
            raise ValueError(f"by: expected a metric name, but got {self.by!r}")
        if is_held_out(self.by):
            raise ValueError(f"by: {held_out_message(self.by)}")
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"mode: must be min or max, but got {self.mode!r}")

    @property
    def direction(self) -> str:
        """``min`` or ``max``: the given mode, else from the metric's name."""
        return self.mode or metric_direction(self.by) or "max"


@dataclass(frozen=True)
class TableSpec:
    """One scaling table: which keys make its rows and columns, which values fill its cells."""

    name: str = "table"
    """Heading in table.md and suffix of table_<name>.csv."""
    rows: tuple[str, ...] = ()
    """Row keys: dotted config paths or trial columns such as ``n_params``."""
    columns: tuple[str, ...] = ()
    """Column keys; when given, the table is a pivot of rows x columns."""
    values: tuple[str, ...] = ("test/exact_match",)
    """Metric names or summary columns shown in the cells."""
    aggregate: str = "mean_std"
    """How a cell summarises its group: mean_std | mean | max | min | median."""
    select: Selection | None = None
    """Best-per-cell selection (see the module docstring), or None to report every trial."""
    fit: FitSpec | None = None
    """A scaling law fitted to the table's (selected) trials (sweeps.analysis.power_law), or
    None."""

    def __post_init__(self) -> None:
        # Accept lists (and a lone string) so callers can pass YAML values straight through.
        for field in ("rows", "columns", "values"):
            keys = getattr(self, field)
            object.__setattr__(self, field, (keys,) if isinstance(keys, str) else tuple(keys))
        if self.aggregate not in AGGREGATES:
            raise ValueError(
                f"aggregate must be one of {', '.join(AGGREGATES)}, but got {self.aggregate!r}"
            )
        if not self.values:
            raise ValueError(f"table {self.name!r}: values must not be empty")
        shared = sorted(set(self.rows) & set(self.columns))
        if shared:
            raise ValueError(f"table {self.name!r}: {shared[0]!r} is both a row and a column key")
        if self.fit is not None and self.fit.per is not None:
            stray = [k for k in self.fit.per if k not in {*self.rows, *self.columns}]
            if stray or self.fit.x in self.fit.per:
                bad = stray[0] if stray else self.fit.x
                raise ValueError(
                    f"fit.per: {bad!r} is not a row or column key other than x "
                    f"(keys: {', '.join([*self.rows, *self.columns]) or 'none'})"
                )
        if self.select is not None:
            keyed = sorted(set(self.select.over) & {*self.rows, *self.columns})
            if keyed:
                raise ValueError(
                    f"select.over: {keyed[0]!r} is also a row or column key; a cell can only "
                    "choose among keys it does not fix"
                )


def table_specs_from_block(block: object) -> list[TableSpec]:
    """The ``table:`` block of a search-space file (one mapping, a list of them, or None): the
    one parser of it (``sweeps.spec.sweep_spec`` adds the checks that need the run config).
    An unnamed table is ``table``, ``table_2``, ...; names must be unique, as each names a
    ``table_<name>.csv``. Errors are ValueErrors whose text is ``<dotted path>: <message>``."""
    if block is None:
        return []
    if isinstance(block, Mapping):
        items, paths = [block], ["table"]
    elif isinstance(block, list):
        items, paths = block, [f"table[{i}]" for i in range(len(block))]
    else:
        raise ValueError(f"table: expected a mapping or a list of mappings, but got {block!r}")
    specs = [
        _spec_from_mapping(item, path, i)
        for i, (item, path) in enumerate(zip(items, paths, strict=True))
    ]
    first: dict[str, str] = {}
    for spec, path in zip(specs, paths, strict=True):
        if spec.name in first:
            raise ValueError(
                f"{path}.name: {spec.name!r} already names {first[spec.name]}; table names must "
                "be unique (each names a table_<name>.csv)"
            )
        first[spec.name] = path
    return specs


def _spec_from_mapping(item: object, path: str, index: int) -> TableSpec:
    if not isinstance(item, Mapping):
        raise ValueError(f"{path}: expected a mapping, but got {item!r}")
    unknown = sorted(set(item) - set(_SPEC_KEYS), key=str)
    if unknown:
        raise ValueError(f"{path}.{unknown[0]}: unknown key (allowed: {', '.join(_SPEC_KEYS)})")
    name = item.get("name", "table" if index == 0 else f"table_{index + 1}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}.name: expected a non-empty string, but got {name!r}")
    aggregate = item.get("aggregate", "mean_std")
    if aggregate not in AGGREGATES:
        raise ValueError(
            f"{path}.aggregate: must be one of {', '.join(AGGREGATES)}, but got {aggregate!r}"
        )
    keys = {f: _string_list(item.get(f, []), f"{path}.{f}") for f in ("rows", "columns")}
    values = _string_list(item.get("values", ["test/exact_match"]), f"{path}.values")
    if not values:
        raise ValueError(f"{path}.values: must not be empty")
    select = _selection_from_mapping(item.get("select"), f"{path}.select")
    fit = fit_spec_from_mapping(item.get("fit"), f"{path}.fit")
    try:
        return TableSpec(
            name,
            tuple(keys["rows"]),
            tuple(keys["columns"]),
            tuple(values),
            aggregate,
            select,
            fit,
        )
    except ValueError as err:
        sep = "." if str(err).startswith(("select.", "fit.")) else ": "
        raise ValueError(f"{path}{sep}{err}") from None


def _selection_from_mapping(item: object, path: str) -> Selection | None:
    if item is None:
        return None
    check_block(item, path, _SELECT_KEYS, ("over", "by"), "select")
    over = _string_list(item["over"], f"{path}.over")
    try:
        return Selection(tuple(over), item["by"], item.get("mode"))
    except ValueError as err:
        raise ValueError(f"{path}.{err}") from None


def _string_list(value: object, path: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{path}: expected a list of names, but got {value!r}")
    return value

"""Frozen dataclasses from plain dicts, strictly: bad keys and types name their dotted path.

Each concern (task, format, model, ...) owns one frozen dataclass in the module that uses it;
this module turns nested dicts (from YAML or ``--set``) into those dataclasses and back, so
the same dotted path (``model.n_layer``) names a field everywhere.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, TypeVar

from arith.errors import ConfigError

T = TypeVar("T")


class UnknownKeyError(ConfigError):
    """A key its dataclass does not have: ``key``, with the keys it does have (``allowed``)
    and, where one is close, the one meant (``max_step`` -> ``did you mean max_steps?``)."""

    def __init__(self, path: str, key: str, allowed: list[str], hint: str | None = None) -> None:
        self.key, self.allowed = key, allowed
        hint = hint if hint is not None else did_you_mean(key, allowed)
        listed = ", ".join(allowed)
        super().__init__(path, f"unknown key;{hint} allowed keys are: {listed}")


def did_you_mean(name: str, choices: list[str], cutoff: float = 0.6) -> str:
    """`` did you mean max_steps?`` for the closest of ``choices`` (difflib's ratio at least
    ``cutoff``), else an empty string."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=cutoff)
    return f" did you mean {close[0]}?" if close else ""


def from_dict(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass ``cls`` from ``data``, checking every key and value type."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path or "config", f"expected a mapping, but got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        raise UnknownKeyError(_join(path, str(unknown[0])), str(unknown[0]), sorted(fields))
    kwargs = {name: _convert(hints[name], value, _join(path, name)) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as err:  # a required field left out
        raise ConfigError(path or "config", str(err)) from None


def to_dict(obj: Any) -> Any:
    """Nested plain dicts/lists of a dataclass, ready for YAML or JSON."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [to_dict(v) for v in obj]
    return obj


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"n_layer": 2}}`` -> ``{"model.n_layer": 2}``; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = _join(prefix, key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, dotted))
        else:
            flat[dotted] = value
    return flat


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` for ``dotted == "a.b"``, creating mappings on the way."""
    *parents, leaf = dotted.split(".")
    node = data
    for i, key in enumerate(parents):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(".".join(parents[: i + 1]), f"is not a section, cannot set {dotted}")
        node = child
    node[leaf] = value


def field_paths(cls: type) -> set[str]:
    """Every dotted leaf path a dataclass tree accepts (``model.n_layer``, ...)."""
    hints = typing.get_type_hints(cls)
    paths: set[str] = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            paths |= {f"{f.name}.{sub}" for sub in field_paths(hints[f.name])}
        else:
            paths.add(f.name)
    return paths


def _huge(value: int) -> str:
    # str() refuses integers past 4300 digits, so describe the size instead of printing it
    return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, path: str) -> Any:
    """Check ``value`` against annotation ``tp`` (lenient only where YAML is: int -> float)."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path)
            except ConfigError:
                continue
        raise ConfigError(path, f"expected {_describe(tp)}, but got {value!r}")
    if origin is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        raise ConfigError(path, f"expected {_describe(tp)}, but got {value!r}")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected {_describe(tp)}, but got {value!r}")
        item_type = typing.get_args(tp)[0]
        return tuple(_convert(item_type, v, f"{path}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) >= 2**63:  # beyond any real count; torch and numpy cannot hold it
                raise ConfigError(path, f"expected an integer below 2**63, but got {_huge(value)}")
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)  # YAML reads 1e5 as a float
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise ConfigError(path, f"expected a float, but got {_huge(value)}") from None
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"unsupported config annotation {tp!r} at {path}")
    raise ConfigError(path, f"expected {_describe(tp)}, but got {value!r}")

"""A search-space file read: its YAML (``yaml.safe_load`` only), its ``--set`` overrides, and
the one error type a mistake in a spec raises (``SpecError``, one line). ``sweeps.spec.sweep_spec``
checks what is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from arith import dataconf
from arith.config import load_yaml, with_floats
from arith.errors import ConfigError

BLOCKS = ("sweep", "base", "space", "derived", "table")


class SpecError(ConfigError):
    """A mistake in a search-space file; ``str(err)`` is the one line a command prints."""

    def __str__(self) -> str:
        return printable(super().__str__())


def printable(text: str) -> str:
    """One line whatever a spec holds: control characters (newlines, \\x1e) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# The search spaces shipped with the project, listed when a spec file is not found.
SHIPPED_SPECS = Path(__file__).resolve().parents[2] / "search_spaces"


def read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        return load_yaml(path, label="spec", allow_empty=False)
    except ConfigError as err:
        missing = not Path(path).exists()
        hint = specs_there(Path(path)) if missing else ""
        raise SpecError(err.path, err.message + hint) from None


def specs_there(path: Path) -> str:
    """For a spec file that is not there: ``; did you mean width_vs_depth.yaml? the specs in
    search_spaces/: ...`` from its folder, else ./search_spaces, else the shipped ones."""
    folders = [path.parent, Path("search_spaces"), SHIPPED_SPECS]
    folder = next((f for f in folders if f.is_dir() and any(f.glob("*.yaml"))), None)
    if folder is None:
        return ""
    names = sorted(p.name for p in folder.glob("*.yaml"))
    shown = os.path.relpath(folder.resolve())
    shown = str(folder.resolve()) if shown.startswith("..") else shown
    close = dataconf.did_you_mean(path.name, names, cutoff=0.8)  # a typo, not any spec
    return f";{close} the specs in {shown}/: {', '.join(names)}"


def _short(err: BaseException) -> str:
    return str(err).split(";")[0][:120] or type(err).__name__


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``--set`` on the spec: ``base.train.max_steps=50``, ``space.model.d_model=[64,128]``,
    ``sweep.scheduler.name=asha``, ``derived.optim.lr=...``, ``table.rows=[model.n_layer]``."""
    out = yaml.safe_load(yaml.safe_dump(raw))  # a deep copy of plain data
    for text in overrides:
        key, sep, value_text = text.partition("=")
        key = key.strip()
        if not sep or "." not in key:
            raise SpecError("--set", f"expected block.dotted.key=value, but got {text!r}")
        try:
            value = with_floats(yaml.safe_load(value_text)) if value_text.strip() else ""
        except yaml.YAMLError:
            value = value_text
        except (ValueError, RecursionError) as err:
            raise SpecError("--set", f"{key}: cannot read the value: {_short(err)}") from None
        block, rest = key.split(".", 1)
        if block not in BLOCKS:
            raise SpecError("--set", f"{key!r} must start with one of {', '.join(BLOCKS)}")
        section = out.setdefault(block, {})
        if block in ("space", "derived"):  # their keys are themselves dotted paths
            if not isinstance(section, dict):
                raise SpecError(block, f"expected a mapping, but got {section!r}")
            section[rest] = value
        elif block == "table" and isinstance(section, list):
            index, _, sub = rest.partition(".")
            if not index.isdigit() or int(index) >= len(section) or not sub:
                raise SpecError("--set", f"table is a list; use table.<index>.<key>, got {key!r}")
            dataconf.set_dotted(section[int(index)], sub, value)
        else:
            try:
                dataconf.set_dotted(out, key, value)
            except ConfigError as err:
                raise SpecError(err.path, err.message) from None
    return out

"""A sweep's saved state in its output folder (``sweep.json``): which sweep, which MLflow
parent run and store, and after an ``--extend`` which Tune experiment is current; and the one
error type a sweep's checks raise. Light on purpose: reading it imports no MLflow or pandas."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sweeps.analysis.store import read_state

if TYPE_CHECKING:
    from sweeps.spec.sweep_spec import SweepSpec


class SweepError(Exception):
    """A reason not to start (str(err) is the one line shown after ``error: ``)."""


def tune_name(spec: SweepSpec, out_dir: Path) -> str:
    """The name (folder) of the Tune experiment a --resume continues: the sweep's own, or after
    an --extend that round's (``sweeps.runtime.extend``), as ``sweep.json`` names it."""
    return read_state(out_dir).get("tune_name") or spec.name


def extend_tune_name(name: str, round_: int) -> str:
    """The Tune experiment of --extend round ``round_`` (1, 2, ...) of sweep ``name``."""
    return f"{name}-extend{round_}"


def experiment_dir(spec: SweepSpec, out_dir: Path, storage: str | None = None) -> str:
    """Where that Tune experiment lies: in ``storage``, else in ``out_dir/ray``."""
    root = storage.rstrip("/") if storage else str(out_dir / "ray")
    return f"{root}/{tune_name(spec, out_dir)}"

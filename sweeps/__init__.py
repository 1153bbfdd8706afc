"""Hyperparameter sweeps over arith runs: Ray Tune search, MLflow tracking, scaling tables.

From Python (a notebook), the calls of ``sweeps.api``: ``sweeps.load_trials``,
``sweeps.load_curves``, ``sweeps.tables``, ``sweeps.plots``, ``sweeps.run_spec`` and
``sweeps.compare_sweeps`` (named apart from the command modules ``sweeps.run`` and
``sweeps.compare``). They are imported on first use, so ``import sweeps`` stays light (no
pandas, MLflow or Ray until one is called).
"""

from __future__ import annotations

from typing import Any

__all__ = ["compare_sweeps", "load_curves", "load_trials", "plots", "run_spec", "tables"]


def __getattr__(name: str) -> Any:
    # PEP 562: a module-level __getattr__ makes the re-exports lazy.
    if name in __all__:
        from sweeps import api

        return getattr(api, name)
    raise AttributeError(f"module 'sweeps' has no attribute {name!r}")

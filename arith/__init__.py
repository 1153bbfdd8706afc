"""arith: one training run of a small transformer on arithmetic, torch only.

Grouped by the run's pipeline, each stage importing only the stages before it:

    problems -> text -> data -> model -> evaluation -> training

``config`` composes each stage's frozen dataclass into one ``RunConfig``; ``train``, ``predict``
and ``bench`` are the commands (``python -m arith.train``). This package imports neither Ray
nor MLflow. The names below are handed on lazily, so ``import arith`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> the module that defines it.
_EXPORTS = {
    "ConfigError": "arith.errors",
    "RunConfig": "arith.config",
    "from_dict": "arith.config",
    "load": "arith.config",
    "TaskConfig": "arith.problems.tasks",
    "Problems": "arith.problems.tasks",
    "FormatConfig": "arith.text.formats",
    "build_format": "arith.text.formats",
    "DataConfig": "arith.data.dataset",
    "build_dataset": "arith.data.dataset",
    "GPT": "arith.model.gpt",
    "ModelConfig": "arith.model.gpt",
    "OptimConfig": "arith.training.optim",
    "TrainConfig": "arith.training.trainconf",
    "load_model": "arith.predict",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'arith' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

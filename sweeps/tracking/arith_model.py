"""The code of a trial's MLflow model: MLflow keeps this file in each model
(``model/arith_model.py``) and runs it to load the model (MLflow's models from code), with
``arith`` as one zip file in the model's code paths (``model/code/arith.zip``). It imports
MLflow, pandas and ``arith`` only, never ``sweeps``, so the model loads and serves where
neither package is installed (``mlflow models serve``). ``sweeps.tracking.model_flavor`` saves
it.

``mlflow.pyfunc.load_model("runs:/<id>/model").predict(["123 + 456 ="])`` -> ``["579"]``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import set_model

# The model's own arith first, the one its checkpoint was written by: MLflow puts the model's
# code folder first on sys.path before it runs this, and the zip in it goes before that.
# (Saving runs this file where it lies in sweeps, with no zip on the path.)
_ARITH_ZIP = next((Path(p, "arith.zip") for p in sys.path if Path(p, "arith.zip").is_file()), None)
if _ARITH_ZIP is not None and str(_ARITH_ZIP) not in sys.path:
    sys.path.insert(0, str(_ARITH_ZIP))

from arith.predict import complete, load_model, problem_ids  # noqa: E402 -- the path above

CHECKPOINT = "checkpoint"  # the model's artifact: the checkpoint folder, under artifacts/


class ArithModel(mlflow.pyfunc.PythonModel):
    """Answers prompts of the model's task in its format, e.g. ``"123 + 456 ="`` -> ``"579"``
    for plain addition: a list of strings in (or a DataFrame whose first column holds them),
    a list of answers out. A prompt it cannot read is a 400 from the server, naming it."""

    def load_context(self, context) -> None:
        self.model, self.fmt = load_model(context.artifacts[CHECKPOINT])

    # Typed DataFrame, what pyfunc hands it: MLflow infers no signature from that type, so a
    # save keeps the one given and runs no predict on the example (nor warns that hints are
    # missing).
    def predict(
        self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> list[str]:
        answers = []
        for prompt in _prompts(model_input):
            try:
                answers.append(complete(self.model, self.fmt, problem_ids(self.fmt, prompt)))
            except ValueError as err:
                raise MlflowException.invalid_parameter_value(f"prompt {prompt!r}: {err}") from None
        return answers


def _prompts(model_input: Any) -> list[str]:
    """The prompts in what ``predict`` is given: pyfunc's DataFrame (the signature's one string
    column, whatever its name: a list of prompts arrives as one), or, called directly, a list."""
    if isinstance(model_input, pd.DataFrame):
        model_input = model_input.iloc[:, 0]
    return [str(p) for p in ([model_input] if isinstance(model_input, str) else model_input)]


# Run by MLflow as a model's code (under a module name of its own), this is the model it loads.
# Imported as sweeps' module (models saved before pickled ArithModel by name), it sets none.
if __name__ != "sweeps.tracking.arith_model":
    set_model(ArithModel())

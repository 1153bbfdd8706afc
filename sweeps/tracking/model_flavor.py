"""A trial's model as an MLflow model: a pyfunc around its checkpoint folder.

``mlflow.pyfunc.load_model("runs:/<id>/model").predict(["123 + 456 ="])`` -> ``["579"]``: one
greedy answer per prompt, by ``arith.predict``'s functions. A trial run's ``model/`` artifact::

    model/MLmodel, python_model.pkl, requirements.txt, input_example.json, ...
    model/artifacts/checkpoint/model.pt, config.yaml    (what ``arith.predict`` reads)

Runs logged before held ``model/model.pt`` and ``model/config.yaml`` directly;
``checkpoint_folder`` finds either. The requirements are given (torch, numpy and PyYAML pinned
to this environment's versions): MLflow's inference of them loads the model in a subprocess,
seconds per trial, many times the save and upload themselves. The code is not copied into the
model: ``sweeps`` and ``arith`` come from the environment that loads it
(``mlflow models serve --env-manager local``, or this project installed).
"""

from __future__ import annotations

import logging
import shutil
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
import yaml
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, DataType, Schema

from arith import config as config_lib
from arith.predict import complete, load_model, problem_ids
from arith.text.formats import build_format
from arith.training.checkpoint import MODEL_FILE

CHECKPOINT = "checkpoint"  # the pyfunc's artifact: the model folder, under artifacts/
SIGNATURE = ModelSignature(
    inputs=Schema([ColSpec(DataType.string)]), outputs=Schema([ColSpec(DataType.string)])
)


class _PickledByReference(logging.Filter):
    """MLflow 3 warns at every save that a PythonModel object is pickled. ``ArithModel`` holds
    nothing: it pickles as a reference to its class, imported from ``sweeps`` when loaded (read
    and judged harmless; one line per trial on the driver otherwise)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "serialized using CloudPickle" not in record.getMessage()


logging.getLogger("mlflow.pyfunc").addFilter(_PickledByReference())


def requirements() -> list[str]:
    """What the model needs beyond MLflow (which adds itself), pinned to this environment.
    torch's local label (``+cpu``) is dropped: ``torch==2.13.0`` matches either build."""
    pins = {"torch": "torch", "numpy": "numpy", "pyyaml": "PyYAML"}
    return [f"{name}=={version(dist).split('+')[0]}" for name, dist in pins.items()]


class ArithModel(mlflow.pyfunc.PythonModel):
    """Answers prompts of the model's task in its format, e.g. ``"123 + 456 ="`` -> ``"579"``
    for plain addition: a list of strings in (or a DataFrame whose first column holds them),
    a list of answers out. A prompt it cannot read is a 400 from the server, naming it."""

    def load_context(self, context) -> None:
        self.model, self.fmt = load_model(context.artifacts[CHECKPOINT])

    # Typed DataFrame, what pyfunc hands it: MLflow infers no signature from that type, so a
    # save keeps SIGNATURE and runs no predict on the example (nor warns that hints are missing).
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


def save_pyfunc(folder: str | Path, into: str | Path) -> Path:
    """The MLflow model of the model folder ``folder`` (``model.pt``, ``config.yaml``), written
    to the new folder ``into``: signature, an input example in the model's own format, and the
    requirements given (nothing inferred, so no model is loaded here)."""
    from sweeps.analysis.collect import no_progress_bar  # here: a server loading a model
    # needs none of collect's tables and plots

    folder, into = Path(folder), Path(into)
    config = config_lib.from_dict(yaml.safe_load((folder / "config.yaml").read_text()))
    example = build_format(config.format, config.task).example_prompt()
    # The artifact keeps its folder's name under artifacts/: a fixed one, whatever the trial.
    staged = into.with_name(f"{into.name}-{CHECKPOINT}") / CHECKPOINT
    shutil.copytree(folder, staged)
    try:
        with no_progress_bar():
            mlflow.pyfunc.save_model(
                into,
                python_model=ArithModel(),
                artifacts={CHECKPOINT: str(staged)},
                signature=SIGNATURE,
                input_example=[example],
                pip_requirements=requirements(),
                metadata={"task": config.task.name, "format": config.format.name},
            )
    finally:
        shutil.rmtree(staged.parent, ignore_errors=True)
    return into


def checkpoint_folder(model_dir: str | Path) -> Path:
    """The folder holding ``model.pt`` in a downloaded ``model/`` artifact: the MLflow model's
    checkpoint, or the folder itself for runs logged before trials were MLflow models."""
    model_dir = Path(model_dir)
    inside = model_dir / "artifacts" / CHECKPOINT
    return inside if (inside / MODEL_FILE).is_file() else model_dir

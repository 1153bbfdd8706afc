"""A trial's model as an MLflow model: a pyfunc around its checkpoint folder, carrying its code.

``mlflow.pyfunc.load_model("runs:/<id>/model").predict(["123 + 456 ="])`` -> ``["579"]``: one
greedy answer per prompt, by ``arith.predict``'s functions. A trial run's ``model/`` artifact::

    model/MLmodel, arith_model.py, requirements.txt, input_example.json, ...
    model/code/arith.zip                                (arith, as one zip file)
    model/artifacts/checkpoint/model.pt, config.yaml    (what ``arith.predict`` reads)

The model is its code (MLflow's models from code: ``sweeps/tracking/arith_model.py``, which
imports nothing of ``sweeps``) and the ``arith`` package beside it, so it loads and serves with
MLflow, torch, numpy and PyYAML alone. ``arith`` travels as one zip (about 60 source files):
a model is uploaded per trial, file by file. Models saved before pickled
``sweeps.tracking.model_flavor.ArithModel`` by name (``python_model.pkl``) and load where this
project is installed, and runs logged before that held ``model/model.pt`` and
``model/config.yaml`` directly; ``checkpoint_folder`` finds either. The requirements are given
(torch, numpy and PyYAML pinned to this environment's versions): MLflow's inference of them
loads the model in a subprocess, seconds per trial, many times the save and upload themselves.
"""

from __future__ import annotations

import shutil
import zipfile
from importlib.metadata import version
from pathlib import Path

import mlflow.pyfunc
import yaml
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, DataType, Schema

import arith
from arith import config as config_lib
from arith.text.formats import build_format
from arith.training.checkpoint import MODEL_FILE
from sweeps.tracking import arith_model
from sweeps.tracking.arith_model import CHECKPOINT

# The name models saved before pickled their class by: they load where this project is installed.
ArithModel = arith_model.ArithModel

SIGNATURE = ModelSignature(
    inputs=Schema([ColSpec(DataType.string)]), outputs=Schema([ColSpec(DataType.string)])
)


def requirements() -> list[str]:
    """What the model needs beyond MLflow (which adds itself), pinned to this environment.
    torch's local label (``+cpu``) is dropped: ``torch==2.13.0`` matches either build."""
    pins = {"torch": "torch", "numpy": "numpy", "pyyaml": "PyYAML"}
    return [f"{name}=={version(dist).split('+')[0]}" for name, dist in pins.items()]


def save_pyfunc(folder: str | Path, into: str | Path) -> Path:
    """The MLflow model of the model folder ``folder`` (``model.pt``, ``config.yaml``), written
    to the new folder ``into``: its code (``arith_model.py`` and ``arith.zip``), signature, an
    input example in the model's own format, and the requirements given (nothing inferred, so
    no model is loaded here)."""
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
                python_model=arith_model.__file__,  # MLflow keeps it, and runs it to load
                code_paths=[str(_arith_zip(staged.parent))],
                artifacts={CHECKPOINT: str(staged)},
                signature=SIGNATURE,
                input_example=[example],
                pip_requirements=requirements(),
                metadata={"task": config.task.name, "format": config.format.name},
            )
    finally:
        shutil.rmtree(staged.parent, ignore_errors=True)
    return into


def _arith_zip(into: Path) -> Path:
    """The ``arith`` package's files (no bytecode) as ``into/arith.zip``, importable from there
    (``zipimport``): one upload, not one per source file."""
    root = Path(arith.__file__).parent
    path = into / "arith.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for file in sorted(root.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                out.write(file, Path("arith") / file.relative_to(root))
    return path


def checkpoint_folder(model_dir: str | Path) -> Path:
    """The folder holding ``model.pt`` in a downloaded ``model/`` artifact: the MLflow model's
    checkpoint, or the folder itself for runs logged before trials were MLflow models."""
    model_dir = Path(model_dir)
    inside = model_dir / "artifacts" / CHECKPOINT
    return inside if (inside / MODEL_FILE).is_file() else model_dir

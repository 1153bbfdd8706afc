"""``python -m sweeps.run --register NAME``: the sweep's best trial's model, a new version of the
registered model NAME in MLflow's Model Registry once the sweep has ended.

The best trial is the one the sweep's summary names (``sweep.best_run_id`` on the parent run,
chosen on validation); its ``model/`` artifact is an MLflow model
(``sweeps.tracking.model_flavor``), so ``models:/NAME/<version>`` loads and serves like
``runs:/<id>/model``.
"""

from __future__ import annotations

import posixpath

BEST_RUN_TAG = "sweep.best_run_id"  # set on the parent by sweeps.runtime.outputs


class RegisterError(Exception):
    """The best trial's model could not be registered; the message is one line."""


def name_error(name: str) -> str | None:
    """Why ``name`` cannot name a registered model, or None: MLflow's own rule (not empty, no
    ``/`` or ``:``, a path that normalises to itself), checked before the sweep starts."""
    if not name.strip():
        return "--register: the registered model's name is empty"
    if "/" in name or ":" in name:
        return f"--register: a registered model's name cannot hold '/' or ':', but got {name!r}"
    normal = posixpath.normpath(name)
    if normal != name or normal == "." or normal.startswith(".."):
        return f"--register: a registered model's name must be one plain path, but got {name!r}"
    return None


def register_best(tracking_uri: str, parent_run_id: str, name: str):
    """Register the best trial's model of the sweep whose parent run is ``parent_run_id`` as a
    new version of ``name`` (created if new); the ``ModelVersion``. RegisterError when the
    sweep has no best trial, or its model is not an MLflow model (a run logged before)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri)
    parent = client.get_run(parent_run_id)
    best = parent.data.tags.get(BEST_RUN_TAG)
    if best is None:
        raise RegisterError(f"--register {name}: the sweep has no best trial to register")
    held = {a.path for a in client.list_artifacts(best, "model")}
    if "model/MLmodel" not in held:
        raise RegisterError(
            f"--register {name}: the best trial's model (run {best}) is no MLflow model "
            "(logged before trials were); train it again to register it"
        )
    try:
        client.create_registered_model(name, tags={"sweep.name": parent.info.run_name or ""})
    except MlflowException as err:
        if err.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    # The version's source is where the model lies, as mlflow.register_model records it.
    source = f"{client.get_run(best).info.artifact_uri}/model"
    return client.create_model_version(
        name,
        source,
        run_id=best,
        tags={"sweep.parent_run_id": parent_run_id},
        description=f"best trial of sweep {parent.info.run_name}, "
        f"chosen on {parent.data.tags.get('sweep.best_chosen_on', 'validation')}",
    )

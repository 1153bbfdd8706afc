"""The MLflow UI opened on a sweep: the Runs table with the swept axes and the metric first.

MLflow 3.17's UI does not take the experiment's kind from the ``mlflow.experimentKind`` tag
(its feature check is hard-coded on, so the kind follows a per-browser switch whose default is
GenAI, and a fresh browser lands on an empty GenAI overview). Two query parameters of the
experiment page do work: ``workflowType=machine_learning`` selects model training, and
``viewStateShareKey=<key>`` loads a view saved on the experiment as the tag
``mlflow.sharedViewState.<key>`` (JSON: search facets plus table state such as
``selectedColumns``). Both read from the installed bundle (mlflow/server/js/build). In headless
Chromium (tests/test_ui_browser.py) the address opens the Runs table in model-training mode; the
saved view's columns were not seen applied there (its loading may wait for a confirmation).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

VIEW_TAG_PREFIX = "mlflow.sharedViewState."


def view_key(parent_run_id: str) -> str:
    return f"sweep-{parent_run_id[:12]}"


def view_state(
    parent_run_id: str, axes: Sequence[str], metric: str, mode: str, columns: Sequence[str] = ()
) -> str:
    """The saved view: children of the sweep nested under its (expanded) parent, the swept axes
    then the metric as columns, best first."""
    selected = [f"params.`{a}`" for a in axes] + [f"metrics.`{metric}`"]
    selected += [f"metrics.`{c}`" for c in columns if c != metric]
    state = {
        "searchFilter": "",
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "selectedColumns": selected,
        "runsExpanded": {parent_run_id: True},
        "runsHiddenMode": "SHOW_ALL",
        "viewMaximized": False,
    }
    return json.dumps(state)


def ui_address(base: str, experiment_id: str, parent_run_id: str) -> str:
    """The experiment page of ``base`` (e.g. http://127.0.0.1:5000) opened on the sweep."""
    query = f"workflowType=machine_learning&viewStateShareKey={view_key(parent_run_id)}"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}?{query}"


def save_view(client, experiment_id: str, parent_run_id: str, state: str) -> None:
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + view_key(parent_run_id), state)

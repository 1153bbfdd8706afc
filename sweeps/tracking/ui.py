"""The MLflow UI opened on a sweep: the Runs table with the sweep's trials, best first, and the
swept axes and the metric as columns.

Read from MLflow 3.17's bundle (mlflow/server/js/build) and checked in headless Chromium
(tests/test_ui_browser.py):
- the UI does not take the experiment's kind from the ``mlflow.experimentKind`` tag (the kind
  follows a per-browser switch whose default is GenAI); ``workflowType=machine_learning`` in the
  address selects model training;
- a saved view is the experiment tag ``mlflow.sharedViewState.<key>`` holding an envelope
  ``{name, createdAt, updatedAt, state}`` whose ``state`` is the JSON of the search facets and
  the table state; it shows in the page's "Views" menu under its name, and
  ``.../experiments/<id>/runs?viewStateShareKey=<key>`` opens it. The address must name the
  ``runs`` tab: the bare experiment page redirects and drops the key;
- ``runsExpanded`` is never restored from a view, so the view filters on the children's parent
  tag instead of expanding the parent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

VIEW_TAG_PREFIX = "mlflow.sharedViewState."


def view_key(parent_run_id: str) -> str:
    return f"sweep-{parent_run_id[:12]}"


def view_state(
    parent_run_id: str, axes: Sequence[str], metric: str, mode: str, columns: Sequence[str] = ()
) -> str:
    """The view's state: the sweep's trials (children of its parent run), best first on the
    selection metric, with the swept axes, then the metric, then ``columns`` (the held-out
    sets' figures, reported beside the choice) as columns."""
    selected = [f"params.`{a}`" for a in axes] + [f"metrics.`{metric}`"]
    selected += [f"metrics.`{c}`" for c in columns if c != metric]
    state = {
        "searchFilter": f"tags.mlflow.parentRunId = '{parent_run_id}'",
        "orderByKey": f"metrics.`{metric}`",
        "orderByAsc": mode == "min",
        "selectedColumns": selected,
        "runsHiddenMode": "SHOW_ALL",
        "viewMaximized": False,
    }
    return json.dumps(state)


def view_envelope(name: str, state: str, now_ms: int | None = None) -> str:
    """The tag's value as the UI's "Views" menu reads it (a view is listed only in this form)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return json.dumps({"name": name, "createdAt": now_ms, "updatedAt": now_ms, "state": state})


def ui_address(base: str, experiment_id: str, parent_run_id: str) -> str:
    """The experiment page of ``base`` (e.g. http://127.0.0.1:5000) opened on the sweep."""
    query = f"workflowType=machine_learning&viewStateShareKey={view_key(parent_run_id)}"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def save_view(client, experiment_id: str, parent_run_id: str, name: str, state: str) -> None:
    value = view_envelope(name, state)
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + view_key(parent_run_id), value)

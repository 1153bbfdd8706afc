"""The MLflow UI opened on a sweep: its trials' curves first (the sweep metric and the training
loss pinned at the top of the chart view), and one click away the Runs table of its trials,
best first, with the swept axes, the metric and the held-out figures as columns.

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
  tag instead of expanding the parent;
- a view restores the chart view's cards and sections (``compareRunCharts``,
  ``compareRunSections``); the UI adds a card of its own for every metric no card shows, in a
  section per namespace, after those of the view where ``isAccordionReordered`` is set (else it
  sorts the sections by name); ``compareRunsMode=CHART`` in the address opens the chart view.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from sweeps.spec.metrics import is_final_figure

VIEW_TAG_PREFIX = "mlflow.sharedViewState."
# The curves a sweep's chart view opens on, after its own metric.
PINNED_CURVES = ("train/loss",)
CURVES_SECTION = "sweep-curves"
# The sections after them, in this order: the rest of the curves, then the metrics without a
# namespace, which the UI groups as "Model metrics" (the single values a trial reports).
SECTIONS_AFTER = ("train", "val", "perf", "time", "Model metrics")


def view_key(parent_run_id: str) -> str:
    return f"sweep-{parent_run_id[:12]}"


def view_state(
    parent_run_id: str, axes: Sequence[str], metric: str, mode: str, columns: Sequence[str] = ()
) -> str:
    """The view's state: the sweep's trials (children of its parent run), best first on the
    selection metric, with the swept axes, then the metric, then ``columns`` (the held-out
    sets' figures, reported beside the choice: tags of a trial's run) as columns; its chart
    view opens on the curves (``pinned_charts``)."""
    selected = [f"params.`{a}`" for a in axes] + [f"metrics.`{metric}`"]
    selected += [column_key(c) for c in columns if c != metric]
    state = {
        "searchFilter": f"tags.mlflow.parentRunId = '{parent_run_id}'",
        "orderByKey": f"metrics.`{metric}`",
        "orderByAsc": mode == "min",
        "selectedColumns": selected,
        "runsHiddenMode": "SHOW_ALL",
        "viewMaximized": False,
        **pinned_charts([metric, *PINNED_CURVES]),
    }
    return json.dumps(state)


def column_key(name: str) -> str:
    """A trial's figure as a Runs table column: a metric, or a tag where the run keeps it
    (``sweeps.spec.metrics.is_final_figure``)."""
    return f"tags.`{name}`" if is_final_figure(name) else f"metrics.`{name}`"


def pinned_charts(curves: Sequence[str]) -> dict:
    """The chart view's state with ``curves`` as line charts of their own section, first: each
    against the step, a loss on a log axis. The UI adds the other metrics' charts to the
    sections of their namespaces, SECTIONS_AFTER in that order, then any other."""
    sections = [_section(CURVES_SECTION, "curves")]
    sections += [
        _section(f"sweep-{name.lower().replace(' ', '-')}", name) for name in SECTIONS_AFTER
    ]
    curves = list(dict.fromkeys(curves))
    charts = [_line_chart(name, f"{CURVES_SECTION}-{i}") for i, name in enumerate(curves)]
    return {
        "compareRunSections": sections,
        "compareRunCharts": charts,
        "isAccordionReordered": True,
    }


def _section(uuid: str, name: str) -> dict:
    return {"uuid": uuid, "name": name, "display": True, "isReordered": True, "deleted": False,
            "isGenerated": False}  # fmt: skip


def _line_chart(metric: str, uuid: str) -> dict:
    """A line chart card as MLflow 3.17's UI keeps one (its ``RunsChartsLineCardConfig``)."""
    return {
        "uuid": uuid,
        "type": "LINE",
        "runsCountToCompare": 10,
        "metricSectionId": CURVES_SECTION,
        "deleted": False,
        "isGenerated": False,
        "metricKey": metric,
        "selectedMetricKeys": [metric],
        "lineSmoothness": 0,
        "xAxisKey": "step",
        "xAxisScaleType": "linear",
        "selectedXAxisMetricKey": "",
        "scaleType": "log" if "loss" in metric else "linear",
        "yAxisKey": "metric",
        "yAxisExpressions": [],
        "ignoreOutliers": False,
        "useGlobalXaxisKey": False,
        "useGlobalLineSmoothing": False,
        "range": {"xMin": None, "xMax": None, "yMin": None, "yMax": None},
    }


def view_envelope(name: str, state: str, now_ms: int | None = None) -> str:
    """The tag's value as the UI's "Views" menu reads it (a view is listed only in this form)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return json.dumps({"name": name, "createdAt": now_ms, "updatedAt": now_ms, "state": state})


def ui_address(base: str, experiment_id: str, parent_run_id: str) -> str:
    """The experiment page of ``base`` (e.g. http://127.0.0.1:5000) opened on the sweep's
    curves (its chart view; the Runs table is the page's Table switch)."""
    query = "workflowType=machine_learning&compareRunsMode=CHART"
    query += f"&viewStateShareKey={view_key(parent_run_id)}"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def save_view(client, experiment_id: str, parent_run_id: str, name: str, state: str) -> None:
    value = view_envelope(name, state)
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + view_key(parent_run_id), value)

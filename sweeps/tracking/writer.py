"""The one writer to MLflow of a sweep: the records the tracker sends, carried out.

A record is a JSON-able dict (``op`` says which write) so that the outbox can hold it through
an outage and journal it for a driver killed meanwhile (``sweeps.tracking.outbox``).
``MLflowWriter.apply`` carries one out, now or much later; it holds what a write needs to find
its run: the experiment, the parent run and each trial's ``TrialState``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from arith.cli import one_line
from sweeps.analysis.convergence import CONVERGENCE_TAG
from sweeps.analysis.run_values import figure_tag
from sweeps.analysis.store import sqlite_file
from sweeps.spec.metrics import is_final_figure
from sweeps.tracking.outbox import Outbox, Record
from sweeps.tracking.state import TrialState

ML_KIND = "custom_model_development"


def artifact_root(tracking_uri: str) -> str | None:
    """Artifacts of a SQLite store go next to the database file (not into ./mlruns of the cwd);
    a server decides for itself."""
    db = sqlite_file(tracking_uri)
    return None if db is None else (db.resolve().parent / "mlartifacts").as_uri()


def curves_and_figures(
    rows: list[tuple[int, dict[str, float]]],
) -> tuple[list[tuple[int, dict[str, float]]], dict[str, str]]:
    """A trial's (step, metrics) rows without its figures measured once (its data's sizes, its
    final sets, its best: ``sweeps.spec.metrics.is_final_figure``), and those as tags of their
    names. MLflow's run page charts every metric, alphabetically by namespace, so forty
    one-point charts (best/, data/, edge/, test/) stood before train/loss and val/exact_match;
    as tags they show as values, and ``sweeps.analysis.run_values`` reads them back."""
    curves, figures = [], {}
    for step, metrics in rows:
        curves.append((step, {k: v for k, v in metrics.items() if not is_final_figure(k)}))
        figures.update({k: figure_tag(v) for k, v in metrics.items() if is_final_figure(k)})
    return [(step, metrics) for step, metrics in curves if metrics], figures


class MLflowWriter:
    """Carries out records against the store at ``tracking_uri``, in experiment
    ``experiment_name``. ``resolve(trial_config) -> RunConfig`` gives a trial's full config
    for its params; ``metric``: the sweep metric, whose history decides a trial's convergence
    label where it has one."""

    def __init__(
        self,
        tracking_uri: str,
        experiment_name: str,
        resolve: Callable[[dict[str, Any]], Any],
        metric: str | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.resolve = resolve
        self.metric = metric
        self.parent_run_id: str | None = None
        self.trials: dict[str, TrialState] = {}
        self.experiment_id: str | None = None  # known once asked for (``experiment``)
        self._client = None

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles the tracker, and this with it; a client does not travel.
        return {**self.__dict__, "_client": None, "experiment_id": None}

    @property
    def client(self):
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def experiment(self) -> str:
        """The experiment's id, created (with its artifacts beside a SQLite store) if new."""
        if self.experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment_name)
            if found is not None:
                self.experiment_id = found.experiment_id
            else:
                location = artifact_root(self.tracking_uri)
                if location is not None:
                    location = f"{location}/{self.experiment_name}"
                self.experiment_id = self.client.create_experiment(
                    self.experiment_name, artifact_location=location
                )
            # Model training, not GenAI: the UI's kind tag (MLflow 3.17's UI reads its kind
            # from the address, see sweeps.tracking.ui, but older and newer ones read this tag).
            self.client.set_experiment_tag(self.experiment_id, "mlflow.experimentKind", ML_KIND)
        return self.experiment_id

    def create_parent(self, tags: dict[str, str]) -> str:
        """The sweep's parent run, created now (not through the outbox: every later write
        names it); returns its id."""
        run = self.client.create_run(
            self.experiment(),
            run_name=self.experiment_name,
            tags={"sweep.name": self.experiment_name, "sweep.role": "parent", **tags},
        )
        self.parent_run_id = run.info.run_id
        return self.parent_run_id

    def outbox(self, journal: Path | None) -> Outbox:
        """An outbox whose writer thread carries out records with this writer, each batch of
        them in one request where they fit (``combine``) and none in more than one
        (``split``); ``journal``: where they wait (``sweeps.tracking.outbox``)."""
        return Outbox(self.apply, journal, combine=self.combine, split=self.split)

    # ---- records ----
    def apply(self, record: Record) -> None:
        """Carry out one record (the outbox calls this, in order, until it succeeds)."""
        op, trial_id = record["op"], record.get("trial")
        state = self.trials.get(trial_id)
        if op == "child":
            self._start_child(trial_id, record.get("tags", {}))
        elif op == "setup":
            self._log_setup(trial_id, record["config"])
        elif op == "running":
            self._set_running(state)
        elif op == "metrics":  # a summary's carries params too: what the trial trained on
            run_id = record.get("run_id") or state.run_id
            rows = record.get("rows") or [(record["step"], record["metrics"])]  # ``combine``d
            rows, figures = curves_and_figures(rows)
            tags = {**(record.get("tags") or {}), **figures}
            self._log_metrics(run_id, rows, tags, record.get("params"))
        elif op == "end":
            self._end_run(state, record["tags"], record["run_status"])
        elif op == "spec":
            self._log_text(record["run_id"], record["text"], "spec.yaml")
        elif op == "model":  # the trial's final model, copied out of Tune's storage
            self._log_model(state.run_id, Path(record["folder"]))
        elif op == "files":  # the trial's diagnostics, laid out as its run holds them
            _draw(record)
            self.client.log_artifacts(state.run_id, record["folder"])
        elif op == "outputs":
            from sweeps.analysis.collect import log_outputs_to_parent

            paths = [Path(p) for p in record["paths"] if Path(p).is_file()]
            log_outputs_to_parent(self.client, record["run_id"], paths)
        elif op == "parent":
            self._log_parent_figures(record)
        else:
            raise ValueError(f"unknown MLflow write {op!r}")

    # ---- child runs ----
    def _start_child(self, trial_id: str, tags: dict[str, str]) -> None:
        state = self.trials[trial_id]
        if state.created:  # a retry: the store may have made the run before the error
            found = self._find_child(trial_id)
            if found is not None:
                state.run_id = found
                return
        state.created = True
        run = self.client.create_run(
            self.experiment(),
            # the trial's id as trials.csv and the models/ folder have it (``88bca_00003``),
            # whole in the UI's Runs table, which cut ``00003-width_vs_depth-88bca`` short;
            # the experiment already names the sweep
            run_name=trial_id,
            tags={
                "mlflow.parentRunId": self.parent_run_id,
                "sweep.name": self.experiment_name,
                "sweep.trial_id": trial_id,
                "sweep.role": "trial",
                "sweep.status": "RUNNING",
                **tags,
            },
        )
        state.run_id = run.info.run_id

    def _find_child(self, trial_id: str) -> str | None:
        runs = self.client.search_runs(
            [self.experiment()],
            filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_run_id}' "
            f"and tags.`sweep.trial_id` = '{trial_id}'",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def _log_setup(self, trial_id: str, trial_config: dict[str, Any]) -> None:
        """config.yaml, then the params (their presence marks a complete setup on resume)."""
        from mlflow.entities import Param

        state = self.trials[trial_id]
        config = self.resolve(trial_config)
        self._log_text(
            state.run_id, yaml.safe_dump(config.to_dict(), sort_keys=False), "config.yaml"
        )
        flat = config.flat()
        # The trial's swept values first (MLflow keeps the order of a batch), then the rest.
        swept = [k for k in trial_config if k in flat]
        flat = {**{k: flat[k] for k in swept}, **flat}
        params = [Param(k, str(list(v) if isinstance(v, tuple) else v)) for k, v in flat.items()]
        self.client.log_batch(state.run_id, params=params)
        state.params = True

    def _set_running(self, state: TrialState) -> None:
        self.client.set_tag(state.run_id, "sweep.status", "RUNNING")
        # A trial stopped by Ctrl-C ended its run KILLED; it carries on now. (The records mark
        # the state RUNNING when they queue this: the writer thread may carry it out later.)
        self.client.update_run(state.run_id, status="RUNNING")

    def _log_metrics(
        self,
        run_id: str,
        steps: list[tuple[int, dict[str, float]]],
        tags: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> None:
        """The metrics of each (step, metrics) pair, ``tags`` and ``params``, in one
        ``log_batch`` call: one request where they are within MLflow's limits, as ``split``
        and ``combine`` keep a trial's records (the client cuts a bigger batch into several)."""
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        rows = [Metric(k, v, now, step) for step, metrics in steps for k, v in metrics.items()]
        run_tags = [RunTag(k, v) for k, v in (tags or {}).items()]
        run_params = [Param(k, v) for k, v in (params or {}).items()]
        self.client.log_batch(run_id, metrics=rows, params=run_params, tags=run_tags)

    @staticmethod
    def combine(records: list[Record]) -> tuple[Record, int]:
        """One ``metrics`` record for the longest run of waiting ``metrics`` records of one
        trial that a single ``log_batch`` request takes (``over_limits``; no parameter or tag
        twice, no metric twice at a step), and how many it stands for. The outbox calls this on
        its queue: a slow store gets one request where it would get one per evaluation."""
        first = records[0]
        if first["op"] != "metrics":
            return first, 1
        run = (first.get("run_id"), first.get("trial"))
        steps, tags, params, seen, count = [], {}, {}, set(), 0
        for record in records:
            if record["op"] != "metrics" or (record.get("run_id"), record.get("trial")) != run:
                break
            metrics, step = record["metrics"], record["step"]
            more_tags, more_params = record.get("tags") or {}, record.get("params") or {}
            keys = {(k, step) for k in metrics}
            sizes = (len(seen | keys), len(params | more_params), len(tags | more_tags))
            if count and (
                keys & seen
                or tags.keys() & more_tags.keys()
                or params.keys() & more_params.keys()
                or over_limits(*sizes)
            ):
                break
            steps.append((step, metrics))
            tags.update(more_tags)
            params.update(more_params)
            seen |= keys
            count += 1
        if count == 1:
            return first, 1
        merged = {k: v for k, v in first.items() if k not in ("metrics", "step")}
        return {**merged, "rows": steps, "tags": tags, "params": params}, count

    @staticmethod
    def split(record: Record) -> list[Record]:
        """``record`` as records that each fit one ``log_batch`` request (``over_limits``),
        in order: a ``metrics`` record too big for one is cut at its step into parts, filled
        with its metrics, then its params, then its tags. The last part is the record with what
        is left, so that a summary's tags, which mark it logged on resume, go out with (or
        after) its last metrics; the parts before it are plain metrics records. Any other
        record is itself."""
        if record["op"] != "metrics" or "rows" in record:
            return [record]
        sizes = {kind: len(record.get(kind) or {}) for kind in ("metrics", "params", "tags")}
        if not over_limits(*sizes.values()):
            return [record]
        sizes = dict.fromkeys(sizes, 0)
        parts: list[dict[str, dict]] = [{kind: {} for kind in sizes}]
        for kind in sizes:
            for key, value in (record.get(kind) or {}).items():
                sizes[kind] += 1
                if over_limits(*sizes.values()):
                    parts.append({kind: {} for kind in sizes})
                    sizes = {k: int(k == kind) for k in sizes}
                parts[-1][kind][key] = value
        if len(parts) == 1:
            return [record]
        what, n = record.get("what", "metrics"), len(parts)
        head = {k: record[k] for k in ("op", "trial", "run_id", "step") if k in record}
        cut = [
            {**head, **part, "what": f"{what} (part {i} of {n})"} for i, part in enumerate(parts, 1)
        ]
        return [*cut[:-1], {**record, **cut[-1]}]

    def _end_run(self, state: TrialState, tags: dict[str, str], run_status: str) -> None:
        from mlflow.entities import RunTag

        # The metric writes before this one are delivered (the outbox keeps order), so the
        # run's history in MLflow is the whole curve the convergence label is read from.
        status = tags.get("sweep.status", state.status or "")
        label = self._convergence(state.run_id, status, state.stopped_reason)
        tags = {**tags, CONVERGENCE_TAG: label}
        self.client.log_batch(state.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self.client.set_terminated(state.run_id, status=run_status)

    def _convergence(self, run_id: str, status: str, stopped_reason: str | None) -> str:
        """The trial's sweeps.analysis.convergence label, from its metric history in MLflow."""
        import pandas as pd

        from sweeps.analysis.convergence import MONITORED, classify, monitored_metric

        records = [
            (name, m.step, m.value)
            for name in dict.fromkeys([self.metric, *MONITORED])
            if name is not None
            for m in self.client.get_metric_history(run_id, name)
        ]
        curves = pd.DataFrame.from_records(records, columns=["metric", "step", "value"])
        name = monitored_metric(curves, self.metric)
        rows = curves[curves["metric"] == name]
        history = list(zip(rows["step"], rows["value"], strict=True))
        return classify(history, status, stopped_reason, metric=name or "val/exact_match")

    # ---- the parent run ----
    def _log_parent_figures(self, record: Record) -> None:
        """The metrics of ``record`` the parent run does not hold at its step yet, the params it
        does not hold at all (MLflow is the truth: a resumed sweep ends again, or replays the
        journal), and its tags. The step is the sweep's ``--extend`` round (0 before any): an
        extended sweep's figures go after the earlier ones."""
        from mlflow.entities import Param

        run_id, step = record["run_id"], record.get("step", 0)
        held = self.client.get_run(run_id).data
        # MLflow keeps each key's latest value, at its highest step (RunData's steps: protobuf).
        held_steps = {m.key: m.step for m in held.to_proto().metrics}
        metrics = {k: v for k, v in record["metrics"].items() if held_steps.get(k, -1) < step}
        params = [Param(k, v) for k, v in record["params"].items() if k not in held.params]
        self._log_metrics(run_id, [(step, metrics)], record["tags"])
        self.client.log_batch(run_id, params=params)

    def _log_model(self, run_id: str, folder: Path) -> None:
        """The model folder as the run's MLflow model ``model/`` (``sweeps.tracking.model_flavor``:
        a pyfunc that ``runs:/<id>/model`` loads, serves and registers), built here, locally."""
        from sweeps.tracking.model_flavor import save_pyfunc

        with tempfile.TemporaryDirectory() as tmp:
            local = save_pyfunc(folder, Path(tmp) / "model")
            self.client.log_artifacts(run_id, str(local), "model")

    def _log_text(self, run_id: str, text: str, name: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text)
            self.client.log_artifact(run_id, str(path))


def over_limits(metrics: int, params: int, tags: int) -> bool:
    """Whether a ``log_batch`` of so many metrics, params and tags is more than one request
    (MLflow's limits: 1000 metrics, 100 params, 100 tags, 1000 of them in all)."""
    from mlflow.utils.validation import (
        MAX_ENTITIES_PER_BATCH,
        MAX_METRICS_PER_BATCH,
        MAX_PARAMS_TAGS_PER_BATCH,
    )

    return (
        metrics > MAX_METRICS_PER_BATCH
        or max(params, tags) > MAX_PARAMS_TAGS_PER_BATCH
        or metrics + params + tags > MAX_ENTITIES_PER_BATCH
    )


def _draw(record: Record) -> None:
    """The figures of a files record's diagnostics numbers (its ``draw``), drawn where the
    writer runs; a figure that cannot be drawn is one warning, and the numbers still go."""
    if not record.get("draw"):
        return
    from sweeps.analysis.plot_diagnostics import draw_diagnostics

    try:
        draw_diagnostics(
            Path(record["folder"]), [Path(p) for p in record["draw"]], record.get("title")
        )
    except Exception as err:  # a figure lost must not hold up the writes behind it
        print(f"warning: no diagnostics figures for {record.get('trial')}: {one_line(err)}",
              file=sys.stderr)  # fmt: skip

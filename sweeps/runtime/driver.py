"""The driver of a sweep, the body of ``python -m sweeps.run``: ``run_sweep`` checks what it
can before Ray starts (``sweeps.runtime.preflight``), trains every trial with Ray Tune (an
embedded local Ray unless an address is given; the Tuner: ``sweeps.runtime.tuner``), records it
in MLflow from this process, then writes the scaling table and plots from MLflow into
DIR/<name>/ and prints the best trial (``sweeps.runtime.outputs``). ``--dry-run`` lists the
trials instead (``sweeps.runtime.dry_run``)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
import time
import warnings
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sweeps.runtime import extend as extending
from sweeps.runtime import preflight, tuning
from sweeps.runtime import resume as resuming
from sweeps.runtime.interrupt import ctrl_c_deferred, ctrl_c_ignored
from sweeps.runtime.outputs import finish, stopped_at_start
from sweeps.runtime.rerun import resume_command
from sweeps.runtime.tuner import build_tuner
from sweeps.spec.sweep_spec import SweepSpec


def run_sweep(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    *,
    address: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    extend: bool = False,
    reuse_stale: bool = False,
    storage: str | None = None,
    storage_shared: bool = False,
    timings: dict[str, float] | None = None,
    reuse_actors: bool = tuning.REUSE_ACTORS,
    register: str | None = None,
) -> int:
    """Run (or with ``resume``, continue; with ``extend``, extend: ``sweeps.runtime.extend``)
    the sweep and write its outputs; returns the exit code. ``address``: a Ray cluster to join
    (else ``RAY_ADDRESS`` where it names one, as in a Ray job; else a local Ray is started);
    through Ray Client (``ray://``) the driver runs on the cluster's head
    (``sweeps.runtime.on_head``). ``timings`` (if given) receives the seconds of each phase:
    startup (Ray, MLflow), tune, outputs. ``reuse_actors``: Tune's setting (``sweeps.bench``
    compares both). ``register``: a Model Registry name for the best trial's model, registered
    once the sweep has ended well (``sweeps.tracking.registry``)."""
    from sweeps.cluster import connection as cluster

    _quiet_logs()
    run = {
        "spec": spec,
        "out_dir": out_dir,
        "tracking_uri": tracking_uri,
        "address": cluster.joined_address(address),
        "resume": resume,
        "overwrite": overwrite,
        "extend": extend,
        "reuse_stale": reuse_stale,
        "storage": storage,
        "storage_shared": storage_shared,
        "reuse_actors": reuse_actors,
        "register": register,
    }
    # Made here, where the command runs: its environment says which variable holds a password.
    run["resume_lines"] = resume_command(
        out_dir,
        tracking_uri,
        address=run["address"],
        storage=storage,
        storage_shared=storage_shared,
    )
    if cluster.is_ray_client(run["address"]):
        from sweeps.runtime.on_head import run_through_client

        return run_through_client(drive, run)
    return drive(**run, timings=timings)


def drive(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    *,
    address: str | None,
    resume: bool,
    overwrite: bool,
    extend: bool,
    reuse_stale: bool,
    storage: str | None,
    storage_shared: bool,
    reuse_actors: bool,
    register: str | None,
    resume_lines: list[str],
    timings: dict[str, float] | None = None,
) -> int:
    """The driver itself (``run_sweep``'s arguments; ``resume_lines``: what a Ctrl-C prints,
    ``sweeps.runtime.rerun``): here, or on a cluster's head where Ray is already up
    (``sweeps.runtime.on_head``). One driver per sweep folder at a time
    (``sweeps.runtime.driver_lock``)."""
    from sweeps.runtime import driver_lock
    from sweeps.runtime.state import SweepError

    _quiet_logs()
    try:
        with driver_lock.held(out_dir):
            return _drive(
                spec,
                out_dir,
                tracking_uri,
                address=address,
                resume=resume,
                overwrite=overwrite,
                extend=extend,
                reuse_stale=reuse_stale,
                storage=storage,
                storage_shared=storage_shared,
                reuse_actors=reuse_actors,
                register=register,
                resume_lines=resume_lines,
                timings={} if timings is None else timings,
            )
    except SweepError as err:  # the lock: another driver has the sweep
        print(f"error: {err}", file=sys.stderr)
        return 2


def _drive(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    *,
    address: str | None,
    resume: bool,
    overwrite: bool,
    extend: bool,
    reuse_stale: bool,
    storage: str | None,
    storage_shared: bool,
    reuse_actors: bool,
    register: str | None,
    resume_lines: list[str],
    timings: dict[str, float],
) -> int:
    """``drive``'s body, the sweep's lock held."""
    from sweeps.cluster import connection as cluster
    from sweeps.runtime import placement as placing

    start = time.perf_counter()
    modes = {"resume": resume, "overwrite": overwrite, "extend": extend}
    begun = _before_ray(spec, out_dir, tracking_uri, storage, modes, reuse_stale)
    if begun is None:
        return 2
    parent_id, plan = begun
    import ray

    started_ray = not ray.is_initialized() and (plan is None or bool(plan.split.train))
    storage = cluster.storage_path(storage, out_dir)
    connect = started_ray and address
    if connect and (code := preflight.connect_cluster(address, storage, shared=storage_shared)):
        return code
    local_ray = started_ray and not address
    continuing = resume or extend
    placement = placing.place_sweep(
        spec, out_dir, continuing=continuing, local=local_ray, disconnect=bool(connect)
    )
    if placement is None:
        return 2
    slots = tuning.uses_slots(spec, local_ray)
    _note_max_concurrent(spec, address, slots)
    tracker = None
    try:
        # A Ctrl-C here, before Tune runs, leaves what --resume starts afresh (stopped_at_start).
        tuner, tracker = build_tuner(
            spec,
            out_dir,
            tracking_uri,
            resume=resume and resuming.can_resume(spec, out_dir, storage),
            storage=storage,
            reuse_actors=reuse_actors,
            slots=slots,
            points=None if plan is None else plan.split.train,
            placement=placement,
        )
        _start(
            spec,
            tracker,
            out_dir,
            parent_id,
            placement,
            storage=storage,
            local_ray=local_ray,
            slots=slots,
        )
        if plan is not None:
            extending.apply(spec, tracker, plan)
        timings["startup"] = time.perf_counter() - start
        code = finish(spec, tuner, tracker, out_dir, timings, resume_lines)
    except KeyboardInterrupt:
        return stopped_at_start(spec, tracker, resume_lines)
    finally:
        if started_ray:
            with ctrl_c_ignored():
                ray.shutdown()  # on a cluster we connected to: disconnects, the cluster stays
    if register is not None and code == 0:
        code = _register(tracking_uri, tracker.parent_run_id, register)
    return code


def _register(tracking_uri: str, parent_run_id: str, name: str) -> int:
    """The best trial's model registered as ``name``: its version printed, or one line and 1."""
    from sweeps.tracking.registry import RegisterError, register_best

    try:
        version = register_best(tracking_uri, parent_run_id, name)
    except RegisterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    what = f"{version.name} version {version.version}"
    uri = f"models:/{version.name}/{version.version}"
    # a line of the summary's block (sweeps.runtime.report), after the best trial's
    print(f"registered:     {what} ({uri}), the best trial's model")
    return 0


def _before_ray(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    storage: str | None,
    modes: dict[str, bool],
    reuse_stale: bool,
) -> tuple[str | None, extending.Extension | None] | None:
    """(the parent run to continue, the --extend's plan) or, the error printed, None: a Ray
    this project does not support, a store that cannot be reached, nothing to resume or to
    extend, is one line before Ray starts."""
    try:
        parent_id = preflight.check_before_ray(spec, out_dir, tracking_uri, storage, **modes)
        if not modes["extend"]:
            return parent_id, None
        plan = extending.begin(spec, out_dir, tracking_uri, storage, reuse_stale=reuse_stale)
        return plan.parent_id, plan
    except preflight.refusals() as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def _note_max_concurrent(spec: SweepSpec, address: str | None, slots: bool) -> None:
    """On a cluster, sweep.max_concurrent caps nothing (bar Optuna's own limit): say so."""
    if address and spec.sweep.max_concurrent and not slots and spec.sweep.search != "optuna":
        print(
            f"note: sweep.max_concurrent={spec.sweep.max_concurrent} caps a local Ray only; on "
            "a cluster, its resources decide how many trials run at once",
            file=sys.stderr,
        )


def _start(
    spec: SweepSpec,
    tracker,
    out_dir: Path,
    parent_id: str | None,
    placement,
    *,
    storage: str,
    local_ray: bool,
    slots: bool,
) -> None:
    """Start (or attach to, resuming) the parent run, the sweep's ``placement`` and Tune
    experiment (in ``storage``) saved with it, and, with ``local_ray``, the local Ray."""
    from sweeps.runtime import parent as parents

    # A fresh MLflow database spends seconds creating its tables, Ray seconds starting its
    # processes: do both at once, and import what the driver needs later meanwhile.
    importing = threading.Thread(target=_import_ahead, name="import-ahead", daemon=True)
    importing.start()
    with ThreadPoolExecutor(max_workers=1) as pool:
        if parent_id is not None:
            parent = pool.submit(parents.attach, tracker, parent_id, out_dir, placement)
        else:
            experiment = f"{storage.rstrip('/')}/{spec.name}"
            parent = pool.submit(
                parents.start_parent, tracker, spec, out_dir, placement, experiment
            )
        try:
            if local_ray:
                # Ray takes ~10 s to start its processes; say so rather than sit silent.
                print(
                    f"starting a local Ray ({os.cpu_count()} CPUs) ...", file=sys.stderr, flush=True
                )
                with ctrl_c_deferred():
                    _init_ray(spec.sweep.max_concurrent if slots else None)
        finally:
            # A Ctrl-C while Ray starts still leaves the parent run made and known, so that the
            # stop can end it and print the --resume that starts the trials under it; one
            # pressed while MLflow makes it is raised once it is made (ignored, it was lost:
            # on a cluster, where nothing else takes those seconds, the sweep ran to exit 0).
            with ctrl_c_deferred("stopping once the sweep's MLflow run is made ..."):
                futures.wait([parent])
        parent.result()
    # Done before Tune starts, so that the imports neither compete with the first trials for the
    # CPU nor hold Tune's loop at a module's import lock (a precaution, not a measured cost).
    importing.join()


IMPORTED_AHEAD = (
    "arith.training.checkpoint",
    "arith.training.diagnostics",
    "sweeps.analysis.collect",
    "sweeps.analysis.plot_diagnostics",
)


def _import_ahead() -> None:
    """What the driver needs once trials end, imported while Ray starts (Ray's start imports
    none of it) or, on a cluster, while the parent run is made: torch, for a trial's model
    exported from its checkpoint, matplotlib for its diagnostics (``sweeps.tracking.records``),
    pandas, scipy and the plots for the tables (``sweeps.analysis.collect``). 4-5 s of a
    sweep's start on 2 cores where they were imported before Ray started; imported on Tune's
    loop, they would hold it up. An import that fails here fails again where it is used, and
    says so there."""
    with contextlib.suppress(Exception):
        for module in IMPORTED_AHEAD:
            importlib.import_module(module)


# Warnings silenced, each by its message, once read and judged harmless. Nothing else is: a
# DeprecationWarning or FutureWarning is how a coming change of Ray or MLflow shows.
QUIET_WARNINGS = [
    # Ray's ray.init (2.55 to 2.60): a later Ray will stop hiding GPUs from trials that reserve
    # none. Until then (sweeps.cluster.tunefix.RAY_RANGE) it hides them, as sweeps need: a trial
    # with sweep.resources.gpu 0 and train.device auto must not take a GPU it did not reserve.
    (FutureWarning, r"Tip: In future versions of Ray, Ray will no longer override accelerator"),
]


def _quiet_logs() -> None:
    """Ray and MLflow talk a lot at INFO; the progress line is the view of a sweep."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Tune's new console output prints a banner even at verbose=0; the old one is silent there.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    # Result files come from JsonLoggerCallback alone (no CSV or TensorBoard files per trial).
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # The sweep metric may be reported only at the end (best/*); validation already ensured
    # that whatever decides on intermediate results (ASHA, Optuna) uses a per-eval metric.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    for category, message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in ("ray", "ray.tune", "ray.train", "mlflow", "alembic", "optuna"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _init_ray(slots: int | None = None) -> None:
    """The embedded local Ray (an existing cluster: ``sweeps.cluster.connection.connect``), with
    ``slots`` TRIAL_SLOT resources when sweep.max_concurrent caps the trials
    (``sweeps.runtime.tuning``)."""
    import ray

    from sweeps.runtime import tuning

    # ERROR while starting: Ray's start-up notices are not the user's business; Tune's warnings
    # during the sweep are, so its logger goes back to WARNING.
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        resources={tuning.TRIAL_SLOT: slots} if slots else None,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    logging.getLogger("ray.tune").setLevel(logging.WARNING)

"""The checks a sweep makes before Ray starts or MLflow records anything, so that what would
fail later in a traceback is one line and exit 2 instead: a Ray this project does not support,
a tracking store it cannot log to, nothing to resume (or an earlier sweep in the folder without
``--overwrite``), and a cluster that cannot run the sweep."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from arith.cli import one_line
from sweeps.analysis.store import masked, sqlite_file
from sweeps.runtime.interrupt import ctrl_c_deferred
from sweeps.runtime.state import SweepError
from sweeps.spec.sweep_spec import SweepSpec


def check_before_ray(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    storage: str | None,
    *,
    resume: bool,
    overwrite: bool,
    extend: bool = False,
) -> str | None:
    """Everything checked before Ray starts; returns the parent run to resume (None for a new
    sweep, whose folder an earlier sweep no longer holds, and for an ``extend``, whose
    ``sweeps.runtime.extend.begin`` finds the sweep it extends). Raises one of
    ``refusals()``."""
    from sweeps.cluster import tunefix
    from sweeps.runtime import earlier as earlier_runs
    from sweeps.runtime import resume as resuming

    tunefix.require_supported_ray()
    check_tracking_uri(tracking_uri)
    check_output_folder(out_dir)
    check_storage_uri(storage)
    check_store(tracking_uri)
    if resume:
        # The snapshot repaired first: one only in the staging folder is a snapshot still.
        for name, what in resuming.repair_snapshot(spec, out_dir, storage).items():
            print(f"{name}: {what}", file=sys.stderr)
        parent_id = resuming.parent_to_resume(spec, out_dir, tracking_uri, storage=storage)
        resuming.quiet_unstarted_trials()
        return parent_id
    if extend:
        return None
    # Never two sweeps in one folder: continue the earlier one, or clear it first.
    earlier = earlier_runs.earlier_sweep(spec, out_dir, storage)
    if earlier and not overwrite:
        raise earlier_runs.refuse_earlier(spec, earlier, out_dir, tracking_uri)
    if earlier:
        earlier_runs.check_removable(spec, out_dir)
        earlier_runs.remove_earlier(spec, out_dir, storage)
    return None


# Bounded MLflow HTTP calls: without these a dead server blocks each call for minutes
# (7 retries with exponential backoff), stalling the driver and with it every trial.
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def check_store(tracking_uri: str) -> None:
    """Raise SweepError if the tracking store cannot be used; bounds MLflow's HTTP calls."""
    if is_http(tracking_uri):
        for name, value in HTTP_ENV.items():
            os.environ.setdefault(name, value)
        from mlflow import MlflowClient

        try:
            MlflowClient(tracking_uri).search_experiments(max_results=1)
        except Exception as err:  # whatever it is, the sweep cannot log
            reason = one_line(err, 200)
            raise SweepError(
                f"--tracking-uri: cannot reach the MLflow server at {masked(tracking_uri)} "
                f"({reason}); "
                "start it or pass another --tracking-uri"
            ) from None
    elif (db := sqlite_file(tracking_uri)) is not None and not db.parent.is_dir():
        raise SweepError(f"--tracking-uri: no folder {db.parent} for the SQLite store")


def check_tracking_uri(uri: str) -> None:
    """The stores a sweep logs to: an MLflow server or a SQLite file (an ``mlruns`` folder or a
    ``file:`` URI would fail after Ray started, in a traceback)."""
    from sweeps.analysis.store import is_sqlite

    if not (is_http(uri) or is_sqlite(uri)):
        raise SweepError(
            f"--tracking-uri: expected http(s)://HOST:PORT or sqlite:///PATH.db, but got {uri!r}"
        )


# The filesystems Tune's storage opens through pyarrow (pyarrow.fs.FileSystem.from_uri).
STORAGE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file")


def check_storage_uri(storage: str | None) -> None:
    """A --storage URI names a filesystem pyarrow opens (``gs3://`` failed after Ray started,
    in a traceback); plain paths are checked by Tune as it writes."""
    from urllib.parse import urlparse

    from sweeps.cluster.connection import is_remote_uri

    if storage is None or not is_remote_uri(storage):
        return
    scheme = urlparse(storage).scheme
    if scheme not in STORAGE_SCHEMES:
        allowed = ", ".join(f"{s}://" for s in STORAGE_SCHEMES)
        raise SweepError(f"--storage: unknown filesystem {scheme}:// in {storage!r}; use {allowed}")


def check_output_folder(out_dir: Path) -> None:
    """The sweep's output folder can be made and written (else a thread failed in a traceback
    once Ray had started): its nearest existing folder is a writable folder."""
    import os

    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SweepError(f"--out: cannot make {out_dir}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SweepError(f"--out: cannot write {out_dir}: {existing} is not writable")


def connect_cluster(address: str, storage: str, *, shared: bool) -> int | None:
    """Connect to the Ray cluster at ``address`` and check that its nodes reach ``storage``:
    None, connected; else the exit code, the cluster disconnected and the reason printed (2:
    it cannot run the sweep; 130: Ctrl-C, nothing started)."""
    import ray

    from sweeps.cluster import connection as cluster

    print(f"connecting to the Ray cluster at {address} ...", file=sys.stderr, flush=True)
    # Before MLflow records anything, and before the Tuner (through Ray Client, Tune
    # builds it on the head): a cluster that cannot run this sweep is one line. A Ctrl-C
    # meanwhile stops the command once Ray's calls return.
    try:
        with ctrl_c_deferred("stopping once connected to the cluster ..."):
            cluster.connect(address)
            cluster.check_storage(storage, shared=shared)
    except cluster.ClusterError as err:
        ray.shutdown()
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        ray.shutdown()  # disconnects; the cluster stays
        print(
            f"stopped (Ctrl-C) while connecting to the Ray cluster at {address}: nothing was "
            "started; the same command starts the sweep",
            file=sys.stderr,
        )
        return 130
    return None


def refusals() -> tuple[type[Exception], ...]:
    """The errors ``check_before_ray`` raises, each one line for the user (imported here, as
    the checks import them, only once a sweep runs; from a module that imports no Ray, as an
    ``except`` evaluates this while a Ctrl-C may have left Ray half imported)."""
    from sweeps.cluster.errors import ClusterError, UnsupportedRay

    return SweepError, UnsupportedRay, ClusterError

"""The checks a sweep makes before Ray starts or MLflow records anything, so that what would
fail later in a traceback is one line and exit 2 instead: a Ray this project does not support,
a tracking store it cannot log to, nothing to resume (or an earlier sweep in the folder without
``--overwrite``), and a cluster that cannot run the sweep."""

from __future__ import annotations

import sys
from pathlib import Path

from sweeps.spec.sweep_spec import SweepSpec


def check_before_ray(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    address: str | None,
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
    from sweeps.cluster import connection as cluster
    from sweeps.cluster import tunefix
    from sweeps.runtime import resume as resuming

    tunefix.require_supported_ray()
    check_tracking_uri(tracking_uri)
    check_output_folder(out_dir)
    check_storage_uri(storage)
    if resume:
        cluster.check_resume_address(address)
    resuming.preflight(tracking_uri)
    if resume:
        parent_id = resuming.parent_to_resume(spec, out_dir, tracking_uri, storage=storage)
        resuming.quiet_unstarted_trials()
        for name, what in resuming.repair_snapshot(spec, out_dir, storage).items():
            print(f"{name}: {what}", file=sys.stderr)
        return parent_id
    if extend:
        return None
    # Never two sweeps in one folder: continue the earlier one, or clear it first.
    earlier = resuming.earlier_sweep(spec, out_dir, storage)
    if earlier and not overwrite:
        raise resuming.refuse_earlier(spec, earlier, out_dir, tracking_uri)
    if earlier:
        resuming.check_removable(spec, out_dir)
        resuming.remove_earlier(spec, out_dir, storage)
    return None


def check_tracking_uri(uri: str) -> None:
    """The stores a sweep logs to: an MLflow server or a SQLite file (an ``mlruns`` folder or a
    ``file:`` URI would fail after Ray started, in a traceback)."""
    from sweeps.analysis.store import is_sqlite
    from sweeps.runtime.resume import SweepError, is_http

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
    from sweeps.runtime.resume import SweepError

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

    from sweeps.runtime.resume import SweepError

    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SweepError(f"--out: cannot make {out_dir}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SweepError(f"--out: cannot write {out_dir}: {existing} is not writable")


def connect_cluster(address: str, storage: str, *, shared: bool) -> bool:
    """Connect to the Ray cluster at ``address`` and check that its nodes reach ``storage``;
    False, the error printed and the cluster disconnected, when it cannot run the sweep."""
    import ray

    from sweeps.cluster import connection as cluster

    print(f"connecting to the Ray cluster at {address} ...", file=sys.stderr, flush=True)
    # Before MLflow records anything, and before the Tuner (through Ray Client, Tune
    # builds it on the head): a cluster that cannot run this sweep is one line.
    try:
        cluster.connect(address)
        cluster.check_storage(storage, shared=shared, via_client="://" in address)
    except cluster.ClusterError as err:
        ray.shutdown()
        print(f"error: {err}", file=sys.stderr)
        return False
    return True


def refusals() -> tuple[type[Exception], ...]:
    """The errors ``check_before_ray`` raises, each one line for the user (imported here, as
    the checks import them, only once a sweep runs)."""
    from sweeps.cluster.connection import ClusterError
    from sweeps.cluster.tunefix import UnsupportedRay
    from sweeps.runtime.resume import SweepError

    return SweepError, UnsupportedRay, ClusterError

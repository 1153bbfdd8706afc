"""Sweeps on an existing Ray cluster: connecting, shipping the project to its nodes, and the
checks that stop a configuration which cannot work on the cluster it finds.

Where things run. ``python -m sweeps.run --address ...`` is the driver: Tune's loop and the
MLflow callback run in it, so the tracking store must be reachable from the driver's machine
only (a SQLite file there works). Trials run on any node, and write their checkpoints to Tune's
storage path, which every node must reach: a shared filesystem path or a cloud URI. Submitted
as a Ray job (``sweeps.submit`` or ``ray job submit``), the driver runs on the head node; through
Ray Client (``ray://``) too (``sweeps.runtime.on_head``), so the output folder, storage and
tracking store must be reachable from the head.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import urlparse

from arith.errors import ConfigError
from sweeps.cluster.errors import ClusterError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# What a node needs is the code and the search spaces; never the virtual environment, results,
# local MLflow stores or checkpoints (Ray's upload limit is a few hundred MB, and they are secret
# to nobody but useless there).
EXCLUDES = [
    ".venv",
    ".git",
    "results",
    "runs",
    "mlruns",
    "mlartifacts",
    "*.db",
    "*.pt",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "*.egg-info",
    "build",
]
# Set by Ray's job manager in a submitted job's driver; its runtime env (working_dir included)
# then applies to the whole job, and a second working_dir from ray.init would conflict.
_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def project_runtime_env() -> dict[str, object]:
    """The runtime env that makes ``arith`` and ``sweeps`` importable on every node."""
    return {"working_dir": str(PROJECT_ROOT), "excludes": list(EXCLUDES)}


def in_submitted_job() -> bool:
    return _JOB_CONFIG_ENV in os.environ


def connect(address: str) -> None:
    """Connect this driver to an existing cluster (``auto``, ``host:port`` or ``ray://...``).

    Trials import the project on other nodes from a copy of the project root that Ray uploads
    (excluding EXCLUDES), unless this is a submitted job, whose working dir Ray already ships.
    """
    import grpc

    from sweeps.cluster import auth

    answer = auth.cluster_answer(address)
    if (why := _no_cluster(address, answer)) is not None:
        raise ClusterError("--address", why)
    try:
        auth.use_token("--address", address, answer == grpc.StatusCode.UNAUTHENTICATED)
    except ConfigError as err:
        raise ClusterError("--address", err.message) from None
    import ray

    runtime_env = None if in_submitted_job() else project_runtime_env()
    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            ray.init(
                address=address,
                runtime_env=runtime_env,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
            break
        except ConnectionAbortedError as err:  # Ray Client's server failed to start ours
            if attempt == CLIENT_ATTEMPTS:
                raise ClusterError("--address", _connect_error(address, err)) from None
            ray.shutdown()
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ClusterError("--address", _connect_error(address, err)) from None
    logging.getLogger("ray.tune").setLevel(logging.WARNING)


# Tries at a Ray Client connection whose server failed to start the process that serves it:
# on a loaded head that start can pass the server's own 30 s limit, and the next try succeed.
CLIENT_ATTEMPTS = 3


def is_ray_client(address: str | None) -> bool:
    """``ray://HOST:PORT``: Ray Client, through which the driver runs on the cluster's head
    (``sweeps.runtime.on_head``)."""
    return bool(address) and address.startswith("ray://")


def joined_address(address: str | None) -> str | None:
    """The cluster a sweep joins: ``--address``, else, inside a Ray job or wherever
    ``RAY_ADDRESS`` names a cluster (not a job API's http:// address), that one, as
    ``ray.init()`` would; None: start a local Ray."""
    if address:
        return address
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and not env.startswith(("http://", "https://")):
        return env
    return "auto" if in_submitted_job() else None


def _no_cluster(address: str, answer) -> str | None:
    """Why no Ray cluster can be reached at ``address``, given ``auth.cluster_answer``'s
    status; None when one answered (or nothing was asked). Ray's own connect to a GCS that
    never answers retries for many minutes before its error."""
    import grpc

    from sweeps.cluster.auth import PROBE_TIMEOUT_S

    client = address.startswith("ray://")
    ports = (
        "ray:// takes the port of Ray Client's server (10001 unless `ray start` was given "
        "--ray-client-server-port); host:port without ray:// the GCS's (6379 by default)"
    )
    if answer == grpc.StatusCode.UNAVAILABLE:
        start = "`ray start --head` starts one and prints its address"
        return f"nothing answers at {address!r}: no Ray cluster there ({start}), or {ports}"
    if answer == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (
            f"no answer from {address!r} within {PROBE_TIMEOUT_S} s: check the host and port "
            "and that a firewall lets them through"
        )
    if answer == grpc.StatusCode.UNIMPLEMENTED:
        kind = "a Ray Client server" if client else "a Ray cluster's GCS"
        return f"{address!r} answers, but not as {kind}: {ports}"
    return None


def _connect_error(address: str, err: BaseException) -> str:
    """One line: why the connection failed. A server's traceback (Ray Client's "Initialization
    failure from server:" carries one) is told by its last line, the error itself."""
    chain, cause = [], err
    while cause is not None and len(chain) < 4:
        lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].endswith(":"):
            chain.append(f"{lines[0]} {lines[-1]}")
        else:
            chain.append(lines[0] if lines else "")
        cause = cause.__cause__
    text = " ".join(chain)
    if "auth" in text.lower():
        return (
            f"cannot connect to Ray at {address!r}: the cluster uses token authentication; "
            "set RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN or ~/.ray/auth_token)"
        )
    return f"cannot connect to Ray at {address!r}: {chain[0][:300]}"


def is_remote_uri(path: str) -> bool:
    """A URI that pyarrow opens as a remote filesystem (s3://, gs://, hdfs://, ...)."""
    scheme = urlparse(path).scheme
    return len(scheme) > 1 and scheme != "file"  # len > 1: not a Windows drive letter


def storage_path(storage: str | None, out_dir: Path) -> str:
    """Tune's storage path: ``--storage`` as given (a URI) or absolute, else DIR/<name>/ray."""
    if storage is None:
        return str(out_dir / "ray")
    if is_remote_uri(storage):
        return storage
    return str(Path(storage.removeprefix("file://")).expanduser().resolve())


def alive_nodes() -> list[dict]:
    import ray

    return [node for node in ray.nodes() if node.get("Alive")]


def check_storage(path: str, *, shared: bool) -> int:
    """Stop before anything starts when some trial could not reach Tune's storage path.

    A plain path is fine on a one-node cluster, or when declared shared (``--storage-shared``:
    an NFS/Lustre/... mount at the same path on every node). Returns the number of alive nodes.
    """
    n_nodes = len(alive_nodes())
    if is_remote_uri(path) or shared:
        return n_nodes
    if n_nodes > 1:
        raise ClusterError(
            "--storage",
            f"{path!r} is a path on one machine, but the cluster has {n_nodes} nodes; use a "
            "shared filesystem path "
            "(mounted on every node, with --storage-shared) or a cloud URI (s3://, gs://, ...)",
        )
    return n_nodes

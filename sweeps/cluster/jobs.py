"""A sweep as a Ray job, the body of ``python -m sweeps.submit``: the job API's address, the
job's command line (``python -m sweeps.run ... --address auto`` on the head), its logs and its
exit code."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import time
from pathlib import Path

from sweeps.cluster.connection import PROJECT_ROOT, ClusterError

DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def job_address(given: str | None) -> str:
    address = (
        given
        or os.environ.get("RAY_API_SERVER_ADDRESS")
        or os.environ.get("RAY_ADDRESS")
        or DEFAULT_ADDRESS
    )
    if "://" not in address:  # host:port of the dashboard
        address = f"http://{address}"
    return address


def job_entrypoint(args: argparse.Namespace) -> str:
    """The job's command line. The job runs in a copy of the project root, so the spec is
    named relative to it, and the default output folder and SQLite store (relative to the
    cwd) become absolute paths of this machine, which is the head when submitting locally."""
    spec = Path(args.spec).resolve()
    if not spec.is_relative_to(PROJECT_ROOT):
        raise ClusterError(
            "spec",
            f"{args.spec!r} is outside the project {PROJECT_ROOT}, which is what is uploaded",
        )
    from sweeps.analysis.store import default_tracking_uri, has_credentials

    command = ["python", "-m", "sweeps.run", str(spec.relative_to(PROJECT_ROOT))]
    command += ["--address", "auto"]
    for override in args.overrides:
        command += ["--set", override]
    command += ["--out", str(Path(args.out or "results").resolve())]
    uri = args.tracking_uri or default_tracking_uri()
    if not has_credentials(uri):  # else it travels in the job's environment (job_env)
        command += ["--tracking-uri", uri]
    if args.storage:
        command += ["--storage", args.storage]
    if args.storage_shared:
        command.append("--storage-shared")
    for flag in ("resume", "overwrite"):
        if getattr(args, flag, False):
            command.append(f"--{flag}")
    return shlex.join(command)


def job_env(args: argparse.Namespace) -> dict[str, str]:
    """Environment variables of the job: a tracking URI with credentials in it goes here
    (the driver reads MLFLOW_TRACKING_URI), never into the command line Ray shows."""
    from sweeps.analysis.store import has_credentials

    uri = args.tracking_uri or ""
    return {"MLFLOW_TRACKING_URI": uri} if has_credentials(uri) else {}


def job_client(address: str):
    from ray.job_submission import JobSubmissionClient

    # Ray's SDK logs the upload and the log stream's end; the job's logs are what this shows.
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("ray.dashboard", "ray._private.runtime_env")):
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ClusterError("--address", f"no Ray job API at {address!r}: {text[:200]}") from None


async def stream_logs(client, job_id: str) -> None:
    async for lines in client.tail_job_logs(job_id):
        print(lines, end="", flush=True)


def exit_code(client, job_id: str) -> int:
    """0 for a job that succeeded, the driver's own exit code when it failed with one (2: bad
    input found on the cluster, e.g. storage that its nodes cannot share), else 1."""
    from ray.job_submission import JobStatus

    info = client.get_job_info(job_id)
    for _ in range(50):  # the log stream ends as the job does; its status may lag a little
        if info.status.is_terminal():
            break
        time.sleep(0.2)
        info = client.get_job_info(job_id)
    if info.status == JobStatus.SUCCEEDED:
        return 0
    code = getattr(info, "driver_exit_code", None)
    message = (info.message or "").strip().splitlines()[:1]
    print(f"job {job_id} {info.status.value.lower()}: {''.join(message)}", file=sys.stderr)
    return code if isinstance(code, int) and code > 0 else 1

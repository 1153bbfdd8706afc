"""``python -m sweeps.submit SPEC.yaml [--address http://HEAD:8265] [--set KEY=VALUE ...]
[--out DIR] [--tracking-uri URI] [--storage PATH_OR_URI] [--storage-shared] [--no-wait]``

Submits the sweep as a Ray job: ``python -m sweeps.run SPEC --address auto <the same options>``
runs on the head node with a copy of the project as its working directory; its logs stream
here and this command exits with the job's status (0 succeeded, 2 bad input, 1 otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import sys
import time
from pathlib import Path

from sweeps import auth
from sweeps.cli import ArgumentParser
from sweeps.cluster import PROJECT_ROOT, ClusterError, project_runtime_env
from sweeps.spec import load_spec

DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(prog="python -m sweeps.submit", description=__doc__.split("\n\n")[1])
    parser.add_argument("spec", help="search-space YAML inside the project (it is uploaded)")
    parser.add_argument(
        "--address",
        help="the cluster's job API (default $RAY_API_SERVER_ADDRESS, $RAY_ADDRESS or "
        f"{DEFAULT_ADDRESS})",
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    parser.add_argument("--out", help="output folder on the head (default: ./results, absolute)")
    parser.add_argument("--tracking-uri", help="MLflow URI the head can reach")
    parser.add_argument("--storage", help="Tune storage path or URI every node can reach")
    parser.add_argument("--storage-shared", action="store_true")
    parser.add_argument("--resume", action="store_true", help="continue the sweep in --out")
    parser.add_argument(
        "--overwrite", action="store_true", help="start over where an earlier run of it lies"
    )
    parser.add_argument("--no-wait", action="store_true", help="submit, print the id, return")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Validate here first: a mistake is one line and exit 2 without touching the cluster.
    load_spec(args.spec, args.overrides)
    entrypoint = job_entrypoint(args)
    address = job_address(args.address)
    auth.use_token("--address", address, auth.http_wants_token(address))
    client = _client(address)
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env=project_runtime_env())
    print(f"submitted job {job_id}: {entrypoint}", file=sys.stderr)
    if args.no_wait:
        print(job_id)
        return 0
    try:
        asyncio.run(_stream_logs(client, job_id))
    except KeyboardInterrupt:
        print(f"stopped following; the job goes on (ray job stop {job_id})", file=sys.stderr)
        return 130
    return exit_code(client, job_id)


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
    from sweeps.tracking import default_tracking_uri

    command = ["python", "-m", "sweeps.run", str(spec.relative_to(PROJECT_ROOT))]
    command += ["--address", "auto"]
    for override in args.overrides:
        command += ["--set", override]
    command += ["--out", str(Path(args.out or "results").resolve())]
    command += ["--tracking-uri", args.tracking_uri or default_tracking_uri()]
    if args.storage:
        command += ["--storage", args.storage]
    if args.storage_shared:
        command.append("--storage-shared")
    for flag in ("resume", "overwrite"):
        if getattr(args, flag, False):
            command.append(f"--{flag}")
    return shlex.join(command)


def _client(address: str):
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


async def _stream_logs(client, job_id: str) -> None:
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


if __name__ == "__main__":
    from arith.cli import run_main

    run_main(main)

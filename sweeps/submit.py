"""``python -m sweeps.submit SPEC.yaml [--address http://HEAD:8265] [--set KEY=VALUE ...]
[--out DIR] [--tracking-uri URI] [--storage PATH_OR_URI] [--storage-shared] [--no-wait]``

Submits the sweep as a Ray job: ``python -m sweeps.run SPEC --address auto <the same options>``
runs on the head node with a copy of the project as its working directory; its logs stream
here and this command exits with the job's status (0 succeeded, 2 bad input, 1 otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from sweeps.cli import ArgumentParser
from sweeps.cluster import auth
from sweeps.cluster.connection import project_runtime_env
from sweeps.cluster.jobs import (
    DEFAULT_ADDRESS,
    exit_code,
    job_address,
    job_client,
    job_entrypoint,
    job_env,
    stream_logs,
)
from sweeps.spec.sweep_spec import load_spec


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
    client = job_client(address)
    runtime_env = project_runtime_env()
    if env := job_env(args):
        runtime_env["env_vars"] = env
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env)
    print(f"submitted job {job_id}: {entrypoint}", file=sys.stderr)
    if args.no_wait:
        print(job_id)
        return 0
    try:
        asyncio.run(stream_logs(client, job_id))
    except KeyboardInterrupt:
        print(f"stopped following; the job goes on (ray job stop {job_id})", file=sys.stderr)
        return 130
    return exit_code(client, job_id)


if __name__ == "__main__":
    from arith.cli import run_main

    run_main(main)

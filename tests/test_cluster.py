"""Sweeps on an existing Ray cluster: a real two-node cluster on this machine, a real job
submitted through Ray's job API, a real ``mlflow server`` on 127.0.0.1.

The cluster is a head and a worker started with ``ray start`` (``tests/ray_cluster.py``). Both
nodes see the same local disk, so here a local path IS shared storage, which the sweep is told
with ``--storage-shared``. Token authentication is on, with a token made for the test, as a
cluster should run.

The KubeRay and Slurm templates cannot run here (no Kubernetes, no Slurm): their test only
checks that the YAML is a well-formed RayJob and that the batch script parses (``bash -n``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml
from ray_cluster import (
    BIN,
    ROOT,
    SMOKE,
    LocalCluster,
    _session_pids,
    asks_for_token,
    free_port,
    run_module,
    start_default_head,
)
from sweep_procs import children, ctrl_c, error_lines, fresh_store, start_sweep, wait_until

# Short trials keep the cluster tests short, one trial per node at a time; SPREAD makes them
# long enough (a few seconds) that a second worker starts before the first has run them all.
SMALL = ["--set", "base.train.max_steps=10", "--set", "base.train.eval_every=5"]
SPREAD = ["--set", "base.train.max_steps=800", "--set", "base.train.eval_every=400"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    local = LocalCluster(tmp)
    try:
        local.start()
        yield local
    finally:
        local.stop()
    left = set()
    for sid, marker in zip(local.sids, local.temp_dirs, strict=True):
        left |= _session_pids(sid, marker)
    assert not left, f"processes left behind: {left}"


def _children(tracking_uri: str, name: str = "smoke"):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    return [r for r in runs if r.data.tags.get("sweep.role") == "trial"]


def test_trials_land_on_both_nodes(cluster, tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    storage = tmp_path / "storage"
    result = run_module(
        "sweeps.run", str(SMOKE), *SPREAD, "--address", cluster.address,
        "--storage", str(storage), "--storage-shared", "--out", str(tmp_path / "out"),
        "--tracking-uri", uri, env=cluster.env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    children = _children(uri)
    assert len(children) == 4
    assert {c.data.tags["sweep.status"] for c in children} == {"TERMINATED"}
    # Each trial's result file names the worker process it ran in; Ray's state API says on
    # which node that process (a Tune trial actor) lived.
    pids = set()
    for result_file in (storage / "smoke").glob("*/result.json"):
        pids |= {yaml.safe_load(line)["pid"] for line in result_file.read_text().splitlines()}
    assert len(list((storage / "smoke").glob("*/result.json"))) == 4
    node_of = cluster.node_ids(pids)
    assert pids <= set(node_of), f"pids Ray's state API does not know: {pids - set(node_of)}"
    nodes = {node_of[pid] for pid in pids}
    print(f"trials ran in {len(pids)} processes on {len(nodes)} nodes: {sorted(nodes)}")
    assert len(nodes) >= 2
    assert not (tmp_path / "out" / "smoke" / "ray").exists()  # checkpoints went to --storage


def test_node_local_storage_is_refused_before_anything_starts(cluster, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run_module(
        "sweeps.run", str(SMOKE), "--address", cluster.address, "--out", str(tmp_path / "out"),
        "--tracking-uri", uri, env=cluster.env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: --storage: "), result.stderr
    assert "2 nodes" in lines[0] and "s3://" in lines[0]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


def test_unreachable_cluster_is_one_line(tmp_path):
    """Nothing listens at the address: one line within seconds, nothing made. Ray's own
    connect to a GCS that never answers retried for more than 10 minutes (2026-11-28)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for module, address in (
        ("sweeps.submit", "http://127.0.0.1:1"),
        ("sweeps.run", f"127.0.0.1:{free_port()}"),
        ("sweeps.run", f"ray://127.0.0.1:{free_port()}"),
    ):
        result = run_module(
            module, str(SMOKE), "--address", address, "--out", str(tmp_path / "out"),
            "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", env=env, cwd=tmp_path,
            timeout=120,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr[-2000:]
        lines = error_lines(result.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: --address: "), result.stderr
        if module == "sweeps.run":
            assert "nothing answers at" in lines[0] and "ray start --head" in lines[0], lines
        assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


def test_the_other_port_of_a_cluster_is_one_line_naming_the_right_one(cluster, tmp_path):
    """Ray Client's port without ray://, or the GCS's with it: one line that says which port
    each form takes, before anything starts (Ray's own errors came after long retries)."""
    client_port = cluster.client.rsplit(":", 1)[1]
    for address, kind in (
        (f"127.0.0.1:{client_port}", "a Ray cluster's GCS"),
        (f"ray://{cluster.address}", "a Ray Client server"),
    ):
        result = run_module(
            "sweeps.run", str(SMOKE), "--address", address, "--out", str(tmp_path / "out"),
            "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", env=cluster.env,
            cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr[-2000:]
        lines = error_lines(result.stderr)
        assert len(lines) == 1 and f"answers, but not as {kind}" in lines[0], result.stderr
        assert "ray:// takes the port of Ray Client's server" in lines[0]
        assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


def _ctrl_c_on_the_cluster(cluster, tmp_path, uri: str, moment, after_s: float) -> str:
    """A smoke sweep on ``cluster`` (shared storage), Ctrl-C'd ``after_s`` after ``moment()``
    first holds: it must exit 130 without a traceback; its stderr."""
    flags = (*SMALL, "--address", cluster.address, "--storage", str(tmp_path / "storage"))
    proc = start_sweep(
        tmp_path, uri, [], flags=(*flags, "--storage-shared"), new_session=True, env=cluster.env
    )
    try:
        assert wait_until(moment, 120, proc, every_s=0.02), (tmp_path / "run.err").read_text()
        time.sleep(after_s)
        ctrl_c(proc)
        assert proc.wait(timeout=120) == 130, (tmp_path / "run.err").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    err = (tmp_path / "run.err").read_text()
    assert "Traceback" not in err, err[-3000:]
    return err


def test_ctrl_c_while_connecting_to_a_cluster_is_one_line_and_makes_nothing(cluster, tmp_path):
    """A Ctrl-C while the driver connects: Ray's calls run to their end (raised inside them, a
    press was lost), then exit 130 with a line saying nothing was made."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    connecting = lambda: "connecting to the Ray" in (tmp_path / "run.err").read_text()  # noqa: E731
    err = _ctrl_c_on_the_cluster(cluster, tmp_path, uri, connecting, after_s=0)
    assert "while connecting to the Ray cluster" in err and "nothing was started" in err, err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


def test_ctrl_c_once_connected_to_a_cluster_stops_and_the_printed_command_finishes(
    cluster, tmp_path
):
    """A Ctrl-C in the seconds after the driver has connected (MLflow making the sweep's parent
    run): exit 130 and a printed command that runs the sweep to its end. Ctrl-C was ignored
    there, and the sweep ran on to exit 0 (presses 0.3 to 2.5 s after connecting, 2026-11-28)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # a new store: the press comes as it is made
    # The press 0.3 s after MLflow's database file appears: MLflow is then making its tables
    # (seconds on a fresh database), the parent run next. Not a fixed time after the placement
    # line: what the driver does in between (imports) moves with the code and the machine.
    making = lambda: (tmp_path / "mlflow.db").exists()  # noqa: E731
    err = _ctrl_c_on_the_cluster(cluster, tmp_path, uri, making, after_s=0.3)
    command = err.strip().splitlines()[-1].strip()
    assert command.startswith("python -m sweeps.run ") and command.endswith("--resume"), err
    assert f"--address {cluster.address}" in command
    resumed = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env={**cluster.env, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len({r.data.tags["sweep.trial_id"] for r in runs}) == len(runs) == 4
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_submitted_job_lands_in_mlflow_server(cluster, mlflow_server, tmp_path):
    """sweeps.submit -> Ray job API -> sweeps.run on the head -> a real MLflow server. Beside
    it runs a job with a mistake only the cluster can see (node-local storage on two nodes),
    whose exit code 2 must come back as 2."""
    refused = run_module(
        "sweeps.submit", str(SMOKE), "--address", cluster.dashboard, "--out",
        str(tmp_path / "refused"), "--tracking-uri", f"sqlite:///{tmp_path / 'refused.db'}",
        "--no-wait", env=cluster.env, cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 0, refused.stderr[-3000:]
    refused_id = refused.stdout.strip().splitlines()[-1]
    result = run_module(
        "sweeps.submit", str(SMOKE), *SMALL, "--address", cluster.dashboard,
        "--tracking-uri", mlflow_server, "--storage-shared", "--out", str(tmp_path / "out"),
        env=cluster.env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "4/4 done" in result.stdout + result.stderr  # the job's logs streamed here
    children = _children(mlflow_server)
    assert len(children) == 4
    for child in children:
        assert child.info.status == "FINISHED"
        assert "val/exact_match" in child.data.metrics
    assert (tmp_path / "out" / "smoke" / "table.md").is_file()
    code = (
        "from ray.job_submission import JobSubmissionClient\n"
        "from sweeps.cluster.jobs import exit_code, stream_logs\n"
        "import asyncio\n"
        f"client = JobSubmissionClient({cluster.dashboard!r})\n"
        f"asyncio.run(stream_logs(client, {refused_id!r}))\n"
        f"raise SystemExit(exit_code(client, {refused_id!r}))\n"
    )
    waited = subprocess.run(
        [sys.executable, "-c", code], env={**cluster.env, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert waited.returncode == 2, (waited.stdout + waited.stderr)[-3000:]
    assert "error: --storage: " in waited.stdout
    assert not (tmp_path / "refused.db").exists()


def test_bad_spec_is_refused_before_submitting(cluster, tmp_path):
    bad = run_module(
        "sweeps.submit", str(SMOKE), "--set", "sweep.metric=nope", "--address", cluster.dashboard,
        env=cluster.env, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: sweep.metric: "), bad.stderr
    assert len(error_lines(bad.stderr)) == 1


def test_templates_are_well_formed():
    """Not run: no Kubernetes or Slurm here. The RayJob has what KubeRay reads, its entrypoint
    is this project's command with a cluster-wide storage, and the Slurm script parses."""
    deploy = ROOT / "sweeps" / "cluster" / "deploy"
    job, policy = yaml.safe_load_all((deploy / "kuberay-rayjob.yaml").read_text())
    assert job["apiVersion"].startswith("ray.io/") and job["kind"] == "RayJob"
    spec = job["spec"]
    entry = spec["entrypoint"]
    assert entry.startswith("python -m sweeps.run search_spaces/")
    assert "--address auto" in entry and "--storage" in entry and "--tracking-uri" in entry
    cluster_spec = spec["rayClusterSpec"]
    head = cluster_spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    workers = cluster_spec["workerGroupSpecs"]
    assert head["image"] and workers and workers[0]["replicas"] >= 1
    worker = workers[0]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" in worker["resources"]["limits"]
    assert (ROOT / entry.split()[3]).is_file()  # the spec it names exists
    # safe by default: every pod authenticates with the Secret's token, and a NetworkPolicy
    # lets only the job's own pods (and the operator) reach the head
    for container in (head, worker):
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "ray-auth-token"
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["policyTypes"] == ["Ingress"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {"ray.io/originated-from-cr-name": job["metadata"]["name"]}
    script = deploy / "slurm-sweep.sh"
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    text = script.read_text()
    assert "#SBATCH" in text and "ray start --head" in text and "python -m sweeps.run" in text
    assert "export RAY_AUTH_MODE=token" in text and "export RAY_AUTH_TOKEN" in text


def test_ray_job_submit_by_hand_runs_the_sweep(cluster, tmp_path):
    """docs/clusters.md's manual path: Ray's own ``ray job submit --working-dir .`` with the
    sweep as the entrypoint, no sweeps.submit involved, and no ``--address``: inside a Ray job
    the sweep joins the job's cluster, as ``ray.init()`` does. (On Ray before 2.55, outside the
    supported range since, the job's driver lost its working dir when it connected.)"""
    uri = fresh_store(tmp_path / "mlflow.db")
    entrypoint = [
        "python", "-m", "sweeps.run", "search_spaces/smoke.yaml", *SMALL,
        "--storage-shared", "--out", str(tmp_path / "out"), "--tracking-uri", uri,
    ]  # fmt: skip
    result = subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", cluster.dashboard, "--working-dir", ".",
         "--", *entrypoint],
        cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "succeeded" in result.stdout + result.stderr
    children = _children(uri)
    assert len(children) == 4
    assert {c.data.tags["sweep.status"] for c in children} == {"TERMINATED"}
    assert (tmp_path / "out" / "smoke" / "table.md").is_file()


@pytest.fixture(scope="module")
def default_head(tmp_path_factory):
    """A head started the default way (``ray_cluster.start_default_head``); yields (the head,
    the environment of a user of that machine)."""
    head = start_default_head(tmp_path_factory.mktemp("default_head"))
    try:
        yield head, head.env
    finally:
        head.stop()


def test_default_head_takes_the_token_file(default_head, tmp_path):
    """The head asks for the token that Ray wrote; both commands find and send it. (A Ray
    without token authentication: the head asks for none, and both commands just work.)"""
    head, env = default_head
    uri = fresh_store(tmp_path / "mlflow.db")
    run = run_module(
        "sweeps.run", str(SMOKE), *SMALL, "--set", "space.train.seed=[0]", "--address",
        head.address, "--out", str(tmp_path / "out"), "--tracking-uri", uri, env=env,
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(_children(uri)) == 2
    submitted = run_module(
        "sweeps.submit", str(SMOKE), *SMALL, "--address", head.dashboard, "--out",
        str(tmp_path / "job"), "--tracking-uri", fresh_store(tmp_path / "job.db"), "--no-wait",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    assert submitted.stdout.strip().splitlines()[-1].startswith("raysubmit_")


def test_default_head_without_a_token_is_one_line_quickly(default_head, tmp_path):
    head, env = default_head
    if not asks_for_token(head):
        pytest.skip("this Ray's default head asks for no token: nothing to be missing")
    elsewhere = {**env, "HOME": str(tmp_path)}  # a machine without the token file
    for module, address in (("sweeps.submit", head.dashboard), ("sweeps.run", head.address)):
        start = time.monotonic()
        result = run_module(
            module, str(SMOKE), "--address", address, "--out", str(tmp_path / "out"),
            "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", env=elsewhere, cwd=tmp_path,
        )  # fmt: skip
        seconds = time.monotonic() - start
        assert result.returncode == 2, result.stderr[-3000:]
        lines = error_lines(result.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: --address: "), result.stderr
        assert "RAY_AUTH_MODE=token" in lines[0] and "~/.ray/auth_token" in lines[0]
        assert seconds < 30, (module, seconds)  # imports included, on a loaded machine
        print(f"\n{module} without a token: exit 2 after {seconds:.1f} s")
    assert not (tmp_path / "mlflow.db").exists()

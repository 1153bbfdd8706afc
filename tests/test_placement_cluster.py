"""A sweep's placement on real Ray clusters of this machine (``tests/ray_cluster.py``): a node
that declares a GPU beside one that does not, and a cluster whose GPU nodes are not up yet
but can be added.

Two fakes, because the real things cannot run here: the GPU is declared (``--num-gpus 1``) on
a machine without one, so the trials Ray gives it train on its CPU
(``SWEEPS_CPU_FOR_UNSEEN_GPU``); and no autoscaler runs (no Kubernetes, no cloud), so the
node types it would report to Ray are written where it writes them (Ray's GCS), and the test
itself starts the GPU node, as the autoscaler would on seeing the trials wait.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml
from ray_cluster import ROOT, SMOKE, LocalCluster, run_module
from sweep_procs import children, fresh_store, wait_until

from sweeps.runtime.placement import CPU_FOR_UNSEEN_GPU_ENV, Placement

pytestmark = pytest.mark.slow

SHORT = ["--set", "base.train.max_steps=400", "--set", "base.train.eval_every=200"]
FAKE_GPU = {CPU_FOR_UNSEEN_GPU_ENV: "1"}


def _sweep(cluster: LocalCluster, tmp_path, *more: str, background: bool = False):
    uri = fresh_store(tmp_path / "mlflow.db")
    args = ["--address", cluster.address, "--storage", str(tmp_path / "storage")]
    args += ["--storage-shared", "--out", str(tmp_path / "out"), "--tracking-uri", uri]
    if not background:
        return run_module(
            "sweeps.run", str(SMOKE), *SHORT, *more, *args, env=cluster.env, cwd=tmp_path,
            timeout=400,
        )  # fmt: skip
    err = (tmp_path / "run.err").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "sweeps.run", str(SMOKE), *SHORT, *more, *args],
        cwd=tmp_path, env={**cluster.env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
        stderr=err,
    )  # fmt: skip


def _node_gpus(cluster: LocalCluster) -> dict[str, float]:
    """node id -> the GPUs it declares, from Ray's state API."""
    code = (
        "from ray.util.state import list_nodes\n"
        f"nodes = list_nodes(address={cluster.dashboard!r}, detail=True)\n"
        "print({n.node_id: n.resources_total.get('GPU', 0.0) for n in nodes})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=cluster.env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return yaml.safe_load(out.stdout.strip().splitlines()[-1])


def _trials(storage) -> list[tuple[dict, set[int]]]:
    """(config, worker pids) of each trial, from its result file."""
    found = []
    for path in sorted((storage / "smoke").glob("*/result.json")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        found.append((lines[0]["config"], {line["pid"] for line in lines}))
    return found


@pytest.fixture
def mixed(tmp_path):
    """A head without GPUs and a worker declaring one (the fake GPU node), 1 CPU each."""
    cluster = LocalCluster(tmp_path)
    try:
        cluster.start_head()
        cluster.add_worker(gpus=1, env=FAKE_GPU)
        yield cluster
    finally:
        cluster.stop()


def test_a_mixed_cluster_trains_on_both_kinds_of_node(mixed, tmp_path):
    result = _sweep(mixed, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stderr.splitlines() if x.startswith("placement: "))
    assert "1 at once on the GPUs, 1 on the nodes without GPUs" in line, line
    saved = json.loads((tmp_path / "out" / "smoke" / "sweep.json").read_text())["placement"]
    placement = Placement.from_state(saved)
    trials = _trials(tmp_path / "storage")
    assert len(trials) == 4
    gpu_node = {node for node, gpus in _node_gpus(mixed).items() if gpus > 0}
    node_of = mixed.node_ids(set().union(*(pids for _, pids in trials)))
    classes = []
    for config, pids in trials:
        nodes = {node_of[pid] for pid in pids}
        on_gpu = placement.trial_gpu(json.dumps(config, default=str)) > 0
        classes.append(on_gpu)
        if on_gpu:  # a GPU trial can only be where the GPU is
            assert nodes <= gpu_node, (config, nodes)
    assert any(classes) and not all(classes), classes  # both kinds of trial...
    used = {node_of[pid] for _, pids in trials for pid in pids}
    assert len(used) == 2  # ...and both nodes trained
    assert len(children(f"sqlite:///{tmp_path / 'mlflow.db'}", "smoke")[1]) == 4
    assert not (tmp_path / "out" / "smoke" / "ray").exists()  # checkpoints went to --storage


def _report_autoscaler_node_types(cluster: LocalCluster, groups: list[tuple]) -> None:
    """Write the node types an autoscaler reports ((name, CPUs, GPUs, most)) into the
    cluster's GCS, where Ray's autoscaler writes them (the fake of this module's docstring)."""
    code = (
        "import ray, sys\n"
        "from ray.core.generated import autoscaler_pb2\n"
        "from ray.experimental.internal_kv import _internal_kv_put\n"
        f"ray.init(address={cluster.address!r}, log_to_driver=False)\n"
        "config = autoscaler_pb2.ClusterConfig()\n"
        f"for name, cpus, gpus, most in {groups!r}:\n"
        "    group = config.node_group_configs.add()\n"
        "    group.name, group.max_count = name, most\n"
        "    group.resources['CPU'] = cpus\n"
        "    if gpus: group.resources['GPU'] = gpus\n"
        "_internal_kv_put(ray._raylet.GCS_AUTOSCALER_CLUSTER_CONFIG_KEY, "
        "config.SerializeToString(), namespace=ray._raylet.GCS_AUTOSCALER_STATE_NAMESPACE)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=cluster.env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_gpu_the_autoscaler_can_add_is_waited_for(tmp_path):
    """No GPU node is up, but the autoscaler can add one: a GPU share is asked for (not
    refused, not silently 0), the line says the trials wait, and they train once it is up."""
    cluster = LocalCluster(tmp_path)
    try:
        cluster.start_head()
        _report_autoscaler_node_types(cluster, [("head", 1, 0, 1), ("gpu", 1, 1, 1)])
        proc = _sweep(cluster, tmp_path, "--set", "sweep.resources.gpu=0.5", background=True)
        waiting = lambda: "wait for the autoscaler" in (tmp_path / "run.err").read_text()  # noqa: E731
        assert wait_until(waiting, 120, proc), (tmp_path / "run.err").read_text()[-3000:]
        time.sleep(5)  # nothing trains without the GPU node (MLflow's store is the driver's now)
        assert not list((tmp_path / "storage" / "smoke").glob("*/result.json"))
        cluster.add_worker(gpus=1, env=FAKE_GPU)  # what the autoscaler would do
        assert proc.wait(timeout=400) == 0, (tmp_path / "run.err").read_text()[-3000:]
    finally:
        if "proc" in locals() and proc.poll() is None:
            proc.kill()
        cluster.stop()
    runs = children(f"sqlite:///{tmp_path / 'mlflow.db'}", "smoke")[1]
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}

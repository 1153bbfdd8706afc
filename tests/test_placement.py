"""``sweep.resources.gpu: auto`` (sweeps.runtime.placement): the share each trial gets, on a local
Ray that declares GPUs it does not have (``ray.init(num_gpus=...)``), and the one-line refusals.
No CUDA trial runs here: the CUDA path itself is checked on a GPU only (tests/test_cuda.py,
``python -m sweeps.bench --gpu``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sweep_procs import fresh_store

from sweeps.runtime import placement as placing
from sweeps.runtime import tuning
from sweeps.runtime.cluster_view import ClusterView, NodeKind
from sweeps.spec.sweep_spec import load_spec

placement_of = placing.resolve

SMOKE = Path(__file__).resolve().parent.parent / "search_spaces" / "smoke.yaml"


def _smoke(*sets: str):
    return load_spec(SMOKE, list(sets))


@pytest.mark.parametrize(
    ("n_gpus", "concurrent", "share"),
    [
        (0, 4, 0.0),
        (1, 1, 1.0),
        (2, 2, 1.0),
        (8, 4, 1.0),
        (1, 16, 1 / 16),
        (2, 3, 0.5),
        (1, 3, 0.3333),  # Ray's resolution: three shares take 0.9999 of the GPU
    ],
)
def test_gpu_share_fills_the_gpus(n_gpus, concurrent, share):
    got = placing.gpu_share(n_gpus, concurrent)
    assert got == share
    if n_gpus:  # k = round(1 / share) trials fit on one GPU, and the trials at once fill them
        k = round(1 / got)
        assert k * got <= 1 and k * n_gpus >= concurrent


def test_shipped_specs_ask_auto():
    for path in sorted(SMOKE.parent.glob("*.yaml")):
        spec = load_spec(path, [])
        assert spec.sweep.resources.gpu == "auto", path.name
        assert placing.train_device(spec) == "auto", path.name


def _view(*kinds: tuple, local: bool = False) -> ClusterView:
    """A cluster of node kinds (CPUs, GPUs, up now, at most)."""
    return ClusterView(tuple(NodeKind(*k) for k in kinds), "test", local)


ONE_MACHINE = _view((2.0, 0.0, 1, 1), local=True)


def test_auto_without_gpus_is_todays_cpu_share():
    spec = _smoke()
    placement = placement_of(spec, ONE_MACHINE)
    assert placement.gpu == 0.0 and placement.trial_gpu("any") == 0.0
    assert placing.gpu_refusal(spec, placement) is None


def test_auto_with_cpu_device_takes_no_gpu():
    spec = _smoke("base.train.device=cpu")
    assert placement_of(spec, _view((2.0, 4.0, 1, 1), local=True)).gpu == 0.0


def test_auto_counts_cpus_without_max_concurrent():
    spec = _smoke("sweep.max_concurrent=null")
    assert placement_of(spec, _view((8.0, 2.0, 1, 1), local=True)).gpu == 0.25


def test_max_concurrent_caps_a_local_ray_and_optunas_trials_not_a_clusters_grid():
    """sweep.max_concurrent is the trials at once on a Ray the sweep starts, and Optuna's;
    on a cluster, grid search runs what the cluster holds, and the share follows that."""
    spec = _smoke()  # grid, max_concurrent 2
    assert placement_of(spec, _view((8.0, 2.0, 1, 1), local=True)).gpu == 1.0
    on_cluster = placement_of(spec, _view((8.0, 2.0, 1, 1)))
    assert (on_cluster.gpu, on_cluster.gpu_slots) == (0.25, 8)
    optuna = _smoke("sweep.search=optuna", "space.model.d_model={choice: [16, 32]}")
    assert placement_of(optuna, _view((8.0, 2.0, 1, 1))).gpu == 1.0


def test_a_gpu_group_at_zero_replicas_is_waited_for_not_refused():
    """An autoscaling cluster whose GPU group has no node up yet (KubeRay's minReplicas 0):
    auto takes a share of the GPUs it can add, a number asks for them, and both wait, said in
    the placement's line, instead of training on CPUs without a word or being refused."""
    cluster = _view((4.0, 0.0, 1, 1), (8.0, 1.0, 0, 2))
    auto = placement_of(_smoke(), cluster)
    assert (auto.gpu, auto.gpu_slots, auto.cpu_slots, auto.waits) == (0.125, 16, 4, True)
    assert "wait for the autoscaler" in auto.describe()
    half = placement_of(_smoke("sweep.resources.gpu=0.5"), cluster)
    assert half.gpu == 0.5 and half.waits
    assert placing.gpu_refusal(_smoke("sweep.resources.gpu=0.5"), half) is None
    fixed = _view((4.0, 0.0, 1, 1))  # nothing to add: the old refusal stands
    refused = placing.gpu_refusal(_smoke("sweep.resources.gpu=0.5"), placement_of(_smoke(), fixed))
    assert refused.startswith("sweep.resources.gpu: 0.5 asks for a GPU, but the cluster has none")


def test_a_mixed_cluster_gives_trials_to_both_kinds_of_node():
    """A GPU node (2 CPUs, 1 GPU) beside a node without GPUs (4 CPUs): 2 trials at once on the
    GPU, 4 on the other node; each trial's class follows its key, in that proportion."""
    placement = placement_of(_smoke(), _view((2.0, 1.0, 1, 1), (4.0, 0.0, 1, 1)))
    assert (placement.gpu, placement.gpu_slots, placement.cpu_slots) == (0.5, 2, 4)
    shares = [placement.trial_gpu(f"trial {i}") for i in range(600)]
    assert set(shares) == {0.0, 0.5}
    assert 150 < sum(share > 0 for share in shares) < 250  # about a third
    assert placement.trial_gpu("trial 7") == placement.trial_gpu("trial 7")


def test_a_placement_is_saved_and_read_back_whole():
    placement = placement_of(_smoke(), _view((2.0, 1.0, 1, 1), (4.0, 0.0, 0, 3)))
    assert placing.Placement.from_state(placement.to_state()) == placement


@pytest.mark.parametrize(
    ("sets", "starts"),
    [
        (["sweep.resources.gpu=1"], "sweep.resources.gpu: 1.0 asks for a GPU"),
        (["base.train.device=cuda"], "base.train.device: cuda asks for a GPU"),
    ],
)
def test_a_gpu_asked_for_without_one_is_one_line(sets, starts):
    spec = _smoke(*sets)
    refusal = placing.gpu_refusal(spec, placement_of(spec, ONE_MACHINE))
    assert refusal.startswith(starts) and "\n" not in refusal
    with_gpu = _view((2.0, 1.0, 1, 1), local=True)
    assert placing.gpu_refusal(spec, placement_of(spec, with_gpu)) is None


def test_a_granted_gpu_torch_cannot_see_is_one_line():
    refusal = placing.granted_gpu_refusal([0], cuda_available=False)
    assert refusal.startswith("this trial was granted GPU 0") and "\n" not in refusal
    assert placing.granted_gpu_refusal([0], cuda_available=True) is None
    assert placing.granted_gpu_refusal([], cuda_available=False) is None


@pytest.fixture
def local_ray(request):
    """A local Ray declaring ``request.param`` GPUs, whether or not this machine has any."""
    import ray

    ray.init(num_cpus=2, num_gpus=request.param, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("local_ray", [2], indirect=True)
def test_a_cluster_with_gpus_gives_each_trial_a_share(local_ray, tmp_path):
    from sweeps.runtime.cluster_view import read_cluster
    from sweeps.runtime.tuner import build_tuner

    spec = _smoke()  # max_concurrent 2 on 2 GPUs: a whole GPU each
    cluster = read_cluster(local=True)
    assert (cluster.total("cpus"), cluster.total("gpus")) == (2.0, 2.0)
    placement = placement_of(spec, cluster)
    assert tuning.trial_resources(spec, placement, slots=False) == {"cpu": 1, "gpu": 1.0}
    four = dataclasses.replace(spec, sweep=dataclasses.replace(spec.sweep, max_concurrent=4))
    four_cpus = _view((4.0, 2.0, 1, 1), local=True)  # four at once on two GPUs: half each
    assert tuning.trial_resources(four, placement_of(four, four_cpus), slots=False)["gpu"] == 0.5
    sweep_tuner, _ = build_tuner(
        spec, tmp_path, fresh_store(tmp_path / "mlflow.db"), placement=placement
    )
    trainable = sweep_tuner.tuner._local_tuner._trainable  # what Tune schedules
    bundle = trainable._resources.required_resources
    assert bundle["GPU"] == 1.0 and bundle["CPU"] == 1.0


@pytest.mark.parametrize("local_ray", [0], indirect=True)
def test_a_cluster_without_gpus_keeps_todays_resources(local_ray):
    from sweeps.runtime.cluster_view import read_cluster

    spec = _smoke()
    placement = placement_of(spec, read_cluster(local=True))
    assert tuning.trial_resources(spec, placement, slots=True) == {
        "cpu": 1,
        "gpu": 0.0,
        tuning.TRIAL_SLOT: 1,
    }
    assert placing.gpu_refusal(spec, placement) is None
    refusal = placing.gpu_refusal(_smoke("sweep.resources.gpu=0.5"), placement)
    assert refusal.startswith("sweep.resources.gpu: 0.5 asks for a GPU, but the cluster has none")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without GPUs")
def test_the_driver_refuses_a_gpu_on_a_machine_without_one(tmp_path):
    import subprocess
    import sys

    command = [
        sys.executable, "-m", "sweeps.run", str(SMOKE), "--out", str(tmp_path / "out"),
        "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--set", "sweep.resources.gpu=1",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: sweep.resources.gpu: 1.0 asks for a GPU, but the cluster has none "
        "(set 0, or auto to use GPUs where there are some)"
    ]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without GPUs")
@pytest.mark.parametrize("local_ray", [1], indirect=True)
def test_a_trial_granted_a_gpu_torch_cannot_see_fails_in_one_line(local_ray):
    import ray

    @ray.remote(num_gpus=1)
    def a_trial_start():
        placing.check_granted_gpu()  # as train_trial and train_pack_trial begin

    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        ray.get(a_trial_start.remote())
    assert "this trial was granted GPU 0, but torch cannot see it" in str(raised.value)

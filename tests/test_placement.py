"""``sweep.resources.gpu: auto`` (sweeps.runtime.placement): the share each trial gets, on a local
Ray that declares GPUs it does not have (``ray.init(num_gpus=...)``), and the one-line refusals.
No CUDA trial runs here: the CUDA path itself is checked on a GPU only (tests/test_cuda.py,
``python -m sweeps.bench --gpu``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sweeps.runtime import placement, tuning
from sweeps.spec.sweep_spec import load_spec

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
    got = placement.gpu_share(n_gpus, concurrent)
    assert got == share
    if n_gpus:  # k = round(1 / share) trials fit on one GPU, and the trials at once fill them
        k = round(1 / got)
        assert k * got <= 1 and k * n_gpus >= concurrent


def test_shipped_specs_ask_auto():
    for path in sorted(SMOKE.parent.glob("*.yaml")):
        spec = load_spec(path, [])
        assert spec.sweep.resources.gpu == "auto", path.name
        assert placement.train_device(spec) == "auto", path.name


def test_auto_without_gpus_is_todays_cpu_share():
    spec = _smoke()
    assert placement.resolved_gpu(spec, {"CPU": 2.0, "GPU": 0.0}) == 0.0
    assert placement.gpu_refusal(spec, {"CPU": 2.0, "GPU": 0.0}) is None


def test_auto_with_cpu_device_takes_no_gpu():
    spec = _smoke("base.train.device=cpu")
    assert placement.resolved_gpu(spec, {"CPU": 2.0, "GPU": 4.0}) == 0.0


def test_auto_counts_cpus_without_max_concurrent():
    spec = _smoke("sweep.max_concurrent=null")
    assert placement.resolved_gpu(spec, {"CPU": 8.0, "GPU": 2.0}) == 0.25


@pytest.mark.parametrize(
    ("sets", "starts"),
    [
        (["sweep.resources.gpu=1"], "sweep.resources.gpu: 1.0 asks for a GPU"),
        (["base.train.device=cuda"], "base.train.device: cuda asks for a GPU"),
    ],
)
def test_a_gpu_asked_for_without_one_is_one_line(sets, starts):
    refusal = placement.gpu_refusal(_smoke(*sets), {"CPU": 2.0, "GPU": 0.0})
    assert refusal.startswith(starts) and "\n" not in refusal
    assert placement.gpu_refusal(_smoke(*sets), {"CPU": 2.0, "GPU": 1.0}) is None


def test_a_granted_gpu_torch_cannot_see_is_one_line():
    refusal = placement.granted_gpu_refusal([0], cuda_available=False)
    assert refusal.startswith("this trial was granted GPU 0") and "\n" not in refusal
    assert placement.granted_gpu_refusal([0], cuda_available=True) is None
    assert placement.granted_gpu_refusal([], cuda_available=False) is None


@pytest.fixture
def local_ray(request):
    """A local Ray declaring ``request.param`` GPUs, whether or not this machine has any."""
    import ray

    ray.init(num_cpus=2, num_gpus=request.param, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("local_ray", [2], indirect=True)
def test_a_cluster_with_gpus_gives_each_trial_a_share(local_ray, tmp_path):
    from sweeps.runtime.tuner import build_tuner

    spec = _smoke()  # max_concurrent 2 on 2 GPUs: a whole GPU each
    assert placement.cluster_resources() == {"CPU": 2.0, "GPU": 2.0}
    assert tuning.trial_resources(spec, slots=False) == {"cpu": 1, "gpu": 1.0}
    four = dataclasses.replace(spec, sweep=dataclasses.replace(spec.sweep, max_concurrent=4))
    assert tuning.trial_resources(four, slots=False)["gpu"] == 0.5
    sweep_tuner, _ = build_tuner(spec, tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}")
    trainable = sweep_tuner.tuner._local_tuner._trainable  # what Tune schedules
    bundle = trainable._resources.required_resources
    assert bundle["GPU"] == 1.0 and bundle["CPU"] == 1.0


@pytest.mark.parametrize("local_ray", [0], indirect=True)
def test_a_cluster_without_gpus_keeps_todays_resources(local_ray):
    spec = _smoke()
    assert tuning.trial_resources(spec, slots=True) == {
        "cpu": 1,
        "gpu": 0.0,
        tuning.TRIAL_SLOT: 1,
    }
    assert placement.gpu_refusal(spec) is None
    refusal = placement.gpu_refusal(_smoke("sweep.resources.gpu=0.5"))
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
        placement.check_granted_gpu()  # as train_trial and train_pack_trial begin

    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        ray.get(a_trial_start.remote())
    assert "this trial was granted GPU 0, but torch cannot see it" in str(raised.value)

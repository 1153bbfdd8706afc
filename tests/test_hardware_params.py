"""What a run trained on (issue 32, item 5): train()'s summary carries ``hardware.*``, the
trainable adds Ray's version, and the tracker logs them as the child run's params."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import ray
import torch
from mlflow import MlflowClient
from sweep_procs import FakeTrial, fresh_store

from arith import config as config_lib
from arith.training import device as hardware
from arith.training.cost import describe
from arith.training.device import hardware_record, resolved_precision
from arith.training.reported import HARDWARE_KEYS
from arith.training.trainer import train, train_pack
from sweeps.runtime.trainable import summary_report
from sweeps.spec.space import resolve_run_config
from sweeps.tracking.tracker import MLflowTracker

TINY = [
    "task.n_digits=2",
    "format.name=reversed",
    "model.d_model=16",
    "model.n_layer=1",
    "model.n_head=2",
    "train.batch_size=8",
    "train.max_steps=2",
    "train.eval_every=2",
    "train.train_eval_size=8",
    "train.device=cpu",
    "data.val_size=8",
    "data.test_size=8",
]


def tiny(*overrides: str):
    return config_lib.load(None, [*TINY, *overrides])


def test_a_runs_summary_records_the_hardware_it_trained_on():
    summary = train(tiny("train.compile=auto"))  # train.precision=auto: fp32 on a CPU
    assert {k: summary[k] for k in HARDWARE_KEYS} == {
        "hardware.device": "cpu",
        "hardware.gpu_name": "none",
        "hardware.precision": "fp32",
        "hardware.torch": torch.__version__,
        "hardware.cuda": torch.version.cuda or "none",
        "hardware.step": "eager",  # train.compile=auto on a CPU
    }
    packed = train_pack([tiny("train.seed=0"), tiny("train.seed=1")])
    assert all(s["hardware.device"] == "cpu" for s in packed)
    assert train(tiny("train.compile=graph"))["hardware.step"] == "graph"


@pytest.mark.parametrize(("precision", "resolved"), [("auto", "fp32"), ("bf16", "bf16")])
def test_the_precision_recorded_is_the_resolved_one(precision, resolved):
    assert hardware_record(torch.device("cpu"), precision)["hardware.precision"] == resolved


@pytest.mark.parametrize("native", [True, False])
def test_auto_on_a_cpu_takes_bf16_only_where_it_is_in_hardware_and_pays(monkeypatch, native):
    """bf16 emulated in software is many times slower than fp32 (an AVX2-only CPU: 8x on the
    main job's 128 x 2), and at width 32 it trained worse: ``auto`` takes it only from width 64
    on a CPU with bf16 in hardware. What is named explicitly is kept."""
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    assert resolved_precision(cpu, "auto", 128) == ("bf16" if native else "fp32")
    assert resolved_precision(cpu, "auto", 64) == ("bf16" if native else "fp32")
    assert resolved_precision(cpu, "auto", 32) == "fp32"
    assert resolved_precision(cpu, "auto") == "fp32"
    assert resolved_precision(cpu, "bf16", 32) == "bf16"
    assert resolved_precision(cpu, "fp32", 128) == "fp32"


@pytest.mark.parametrize("supported", [True, False])
def test_auto_on_cuda_takes_bf16_only_from_width_512(monkeypatch, supported):
    """On an H200 fp32 trained faster than bf16 autocast at 100K, 1M and 3M parameters (2 x 64 to
    4 x 256, docs/gpu.md): ``auto`` keeps small models in fp32 on CUDA and takes bf16 from width
    512 where the card has it. No GPU is needed to ask: the device is only named."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: supported)
    cuda = torch.device("cuda")
    assert resolved_precision(cuda, "auto", 64) == "fp32"
    assert resolved_precision(cuda, "auto", 256) == "fp32"
    assert resolved_precision(cuda, "auto", 512) == ("bf16" if supported else "fp32")
    assert resolved_precision(cuda, "auto") == "fp32"
    assert resolved_precision(cuda, "bf16", 64) == "bf16"


def test_native_bf16_is_read_off_the_cpus_flags():
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    expected = any(f" {flag}" in flags for flag in hardware.NATIVE_BF16_FLAGS)
    assert hardware.cpu_has_native_bf16() == expected


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a GPU's record is checked on a GPU")
def test_a_gpus_record_names_its_index_and_its_card():
    record = hardware_record(torch.device("cuda"), "auto")
    assert record["hardware.device"] == f"cuda:{torch.cuda.current_device()}"
    assert record["hardware.gpu_name"] == torch.cuda.get_device_name()
    assert record["hardware.cuda"] == torch.version.cuda


def test_the_trainables_last_report_carries_the_hardware_and_rays_version():
    summary = {"steps": 2, "stopped_reason": "max_steps", "hardware.device": "cuda:0"}
    report = summary_report(summary, "2.60.0")
    assert report["hardware.device"] == "cuda:0" and report["hardware.ray"] == "2.60.0"


def test_the_tracker_logs_the_hardware_as_the_child_runs_params(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    base = {"task": {"name": "addition", "n_digits": 2}, "train": {"max_steps": 2}}
    resolve = functools.partial(resolve_run_config, base, derived={})
    tracker = MLflowTracker(uri, "hardware-test", resolve, describe)
    tracker.start_parent("sweep: {name: hardware-test}\n")
    trial = FakeTrial("t_0", {})
    tracker.on_trial_start(0, [], trial)
    summary = train(tiny())
    result = {**summary_report(summary, ray.__version__), "training_iteration": 1}
    tracker.on_trial_result(1, [], trial, result)
    tracker.on_trial_complete(2, [], trial)
    tracker.finish_parent()
    client = MlflowClient(uri)
    params = client.get_run(tracker.trials["t_0"].run_id).data.params
    assert {k: params[k] for k in HARDWARE_KEYS} == {k: summary[k] for k in HARDWARE_KEYS}
    assert params["hardware.ray"] == ray.__version__
    assert params["train.max_steps"] == "2"  # beside the config's own


def test_evaluation_sums_losses_in_a_dtype_the_device_has():
    """Apple's MPS has no float64: its sums are float32; elsewhere float64, as before."""
    from arith.evaluation.evaluate import loss_sum_dtype

    assert loss_sum_dtype(torch.device("mps")) == torch.float32
    assert loss_sum_dtype(torch.device("cpu")) == torch.float64
    assert loss_sum_dtype(torch.device("cuda")) == torch.float64

"""A training step never waits on the host (issue 32, item 2): between two evaluations nothing
reads a tensor's value back (``item``, ``tolist``, ``cpu``, ``numpy``, a tensor's truth, ``int``
or ``float`` of one). On a GPU each such read waits until the device has caught up, so a step
that makes one keeps the device idle while the host prepares the next.

On CPU a torch function mode counts the reads; on CUDA the same runs also under
``torch.cuda.set_sync_debug_mode("error")``, which fails on any synchronising call (a pageable
host-to-device copy too, which the counter cannot see)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from arith import config as config_lib
from arith.training import trainer

READS = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.__bool__: "__bool__",
    torch.Tensor.__int__: "__int__",
    torch.Tensor.__float__: "__float__",
}

TINY = [
    "task.n_digits=3",
    "format.name=reversed",
    "model.d_model=16",
    "model.n_layer=1",
    "model.n_head=2",
    "train.batch_size=16",
    "train.max_steps=12",
    "train.eval_every=5",
    "train.train_eval_size=16",
    "train.precision=fp32",
    "data.val_size=16",
    "data.test_size=16",
    "optim.warmup_steps=2",
]
# two members that differ in what a pack lets vary: lr, schedule, clipping (one has none)
MEMBERS = [
    ["optim.lr=1e-3", "train.seed=0"],
    ["optim.lr=3e-3", "optim.schedule=constant", "optim.grad_clip=null", "train.seed=1"],
]
CASES = {
    "one": [[]],
    "one-buckets": [["train.length_buckets=2"]],
    "one-abacus-dropout": [["model.position=abacus", "model.dropout=0.1"]],
    "pack": MEMBERS,
    "pack-buckets": [[*m, "train.length_buckets=2"] for m in MEMBERS],
    # Grokfast's gradient filter: one model, and a pack where only member 0 filters
    "one-grad-filter": [["optim.grad_filter=ema"]],
    "pack-grad-filter": [[*MEMBERS[0], "optim.grad_filter=ema"], MEMBERS[1]],
    # the weights' moving average: one model, and a pack where only member 1 keeps one
    "one-weight-ema": [["optim.weight_ema=0.9"]],
    "pack-weight-ema": [MEMBERS[0], [*MEMBERS[1], "optim.weight_ema=0.9"]],
}
# the step that is one CUDA graph (arith.training.graph_step), run eagerly here: a graph replays
# without the host, so its step reads nothing either. Its capture synchronises once a run, so on
# CUDA its cases are tests/test_cuda.py's.
GRAPH = ["train.compile=graph", "model.position=abacus", "model.dropout=0.1"]
GRAPH_CASES = {
    "one-graph": [["train.compile=graph"]],
    "pack-graph-filter-abacus-dropout": [
        [*MEMBERS[0], *GRAPH, "optim.grad_filter=ema"],
        [*MEMBERS[1], *GRAPH, "optim.weight_ema=0.9"],
    ],
}


class HostReads(TorchFunctionMode):
    """Counts host reads of tensors while ``armed`` (this thread only: modes are per thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.reads: Counter[str] = Counter()
        self.losses = 0  # training losses computed while armed: the window held steps

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.armed:
            if func in READS:
                self.reads[READS[func]] += 1
            elif func is torch.nn.functional.cross_entropy:
                self.losses += 1
        return func(*args, **(kwargs or {}))


def train_counting_reads(cases: list[list[str]], device: str, monkeypatch) -> HostReads:
    """Train a pack of ``cases`` and count the host reads from each report to the next
    evaluation: the training steps in between, and nothing else."""
    configs = [config_lib.load(None, [*TINY, *c, f"train.device={device}"]) for c in cases]
    counter = HostReads()
    sync_mode = torch.cuda.get_sync_debug_mode() if device == "cuda" else None

    def arm(on: bool) -> None:
        counter.armed = on
        if sync_mode is not None:
            torch.cuda.set_sync_debug_mode("error" if on else sync_mode)

    evaluate = trainer.evaluate_member

    def evaluate_disarmed(*args, **kwargs):
        arm(False)  # an evaluation reads its results back: that is where reads belong
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(trainer, "evaluate_member", evaluate_disarmed)

    def report(member: int, metrics: dict) -> None:
        arm(not metrics.get("done"))  # the steps until the next evaluation start here

    try:
        with counter:
            summaries = trainer.train_pack(configs, report)
    finally:
        arm(False)
    assert [s["steps"] for s in summaries] == [12] * len(configs)
    return counter


@pytest.mark.parametrize("case", {**CASES, **GRAPH_CASES})
def test_no_step_reads_a_tensor_back_on_the_host(case, monkeypatch):
    counter = train_counting_reads({**CASES, **GRAPH_CASES}[case], "cpu", monkeypatch)
    assert counter.losses >= 12  # every step ran inside a counted window
    assert counter.reads == Counter(), dict(counter.reads)


@pytest.mark.cuda
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the CUDA path (no synchronising call) runs on a GPU only"
)
@pytest.mark.parametrize("case", CASES)
def test_no_step_synchronises_with_a_gpu(case, monkeypatch):
    counter = train_counting_reads(CASES[case], "cuda", monkeypatch)
    assert counter.losses >= 12
    assert counter.reads == Counter(), dict(counter.reads)


def test_training_leaves_no_thread_behind_when_it_ends_or_raises():
    config = config_lib.load(None, [*TINY, "train.device=cpu"])
    before = set(threading.enumerate())
    trainer.train(config)
    assert set(threading.enumerate()) <= before

    class Stop(Exception):
        pass

    def stop_at_5(metrics: dict) -> None:
        if metrics["step"] == 5:
            raise Stop

    with pytest.raises(Stop):
        trainer.train(config, stop_at_5)
    assert set(threading.enumerate()) <= before

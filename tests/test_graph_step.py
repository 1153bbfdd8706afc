"""The graph-ready training step (issue 46, item 1: arith.training.graph_step), checked on CPU
where it runs eagerly: it trains as the eager trainer does (one model, packs, clipping,
Grokfast, Abacus offsets), keeps one shape and the same addresses for the whole run with its
settings on the device, and ``train.compile: auto`` takes it on CUDA only. Its host reads are
counted in tests/test_host_reads.py; its capture as a CUDA graph is checked on a GPU only
(tests/test_cuda.py)."""

from __future__ import annotations

import pytest
import torch

from arith import config as config_lib
from arith.errors import ConfigError
from arith.training import checkpoint as ckpt
from arith.training import graph_step, trainer
from arith.training.optim import ACTIVE, PLAIN

# multi_op's mixed operations: rows of very different lengths from batch to batch
TINY = [
    "task.name=multi_op",
    "task.n_digits=2",
    "model.d_model=16",
    "model.n_layer=1",
    "model.n_head=2",
    "train.batch_size=16",
    "train.max_steps=14",
    "train.eval_every=7",
    "train.train_eval_size=16",
    "train.precision=fp32",
    "train.device=cpu",
    "data.val_size=32",
    "data.test_size=16",
    "data.edge_cases=false",
    "optim.warmup_steps=4",
]
MEMBERS = [
    ["optim.lr=3e-3", "train.seed=0"],
    ["optim.lr=1e-2", "optim.schedule=constant", "optim.grad_clip=null", "train.seed=1"],
]
CASES = {
    "one": [[]],
    "pack": MEMBERS,
    "one-grad-filter": [["optim.grad_filter=ema", "optim.grad_clip=null"]],
    "pack-grad-filter": [[*MEMBERS[0], "optim.grad_filter=ema"], MEMBERS[1]],
    "one-weight-ema": [["optim.weight_ema=0.9"]],
    "pack-weight-ema": [MEMBERS[0], [*MEMBERS[1], "optim.weight_ema=0.9"]],
    "abacus": [["task.name=addition", "model.position=abacus", "model.abacus_max_k=8"]],
    # the abacus_bias table steps at abacus_bias_lr_mult times the learning rate
    "abacus-bias": [["task.name=addition", "model.position=abacus_bias"]],
    "abacus-bias-pack": [
        ["task.name=addition", "model.position=abacus_bias", *member] for member in MEMBERS
    ],
}


def run(cases: list[list[str]], compile: str, folder) -> tuple[list[list[tuple]], list[dict]]:
    """Each member's (step, train loss, validation loss) at its evaluations, and its weights
    at the end (as ``model.pt`` holds them)."""
    configs = [config_lib.load(None, [*TINY, *c, f"train.compile={compile}"]) for c in cases]
    reports: list[list[tuple]] = [[] for _ in configs]

    def report(member: int, metrics: dict) -> None:
        row = (metrics["step"], metrics.get("train/loss"), metrics.get("val/loss"))
        reports[member].append(row)

    trainer.train_pack(configs, report, checkpoint_dir=folder)
    files = [
        ckpt.member_dir(folder, i, len(configs)) / ckpt.MODEL_FILE for i in range(len(configs))
    ]
    return reports, [torch.load(f, weights_only=True)["model"] for f in files]


@pytest.mark.parametrize("case", CASES)
def test_a_graphed_step_trains_as_the_eager_one(case, tmp_path):
    eager, eager_weights = run(CASES[case], "false", tmp_path / "eager")
    graphed, graphed_weights = run(CASES[case], "graph", tmp_path / "graph")
    assert [[s for s, *_ in m] for m in graphed] == [[s for s, *_ in m] for m in eager]
    for member_eager, member_graphed in zip(eager, graphed, strict=True):
        for (_, loss, val), (_, g_loss, g_val) in zip(member_eager, member_graphed, strict=True):
            # fp32 rounding: every token's logits against the answer's, the stacked AdamW
            # against torch's fused kernel (no training loss before the first step)
            for got, want in ((g_loss, loss), (g_val, val)):
                assert (got is None) == (want is None)
                assert want is None or got == pytest.approx(want, rel=1e-4, abs=1e-6)
    for want, got in zip(eager_weights, graphed_weights, strict=True):
        assert got.keys() == want.keys()
        for name in want:  # every parameter, the small ones (a bias table) too
            # the key bias's gradient is zero but for rounding (it adds one constant to a row's
            # scores), and Adam scales that noise to steps of the learning rate's size
            atol = 1e-4 if name.endswith("qkv.bias") else 1e-6
            torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=atol)


def test_the_step_keeps_one_shape_its_addresses_and_its_settings_on_the_device(monkeypatch):
    seen: list[tuple] = []
    settings: list[torch.Tensor] = []
    call = graph_step.GraphedStep.__call__

    def recording(self, batch, active):
        call(self, batch, active)
        buffers = [b for b in self.buffers if b is not None] + [self.settings]
        seen.append(tuple((b.data_ptr(), tuple(b.shape), b.device.type) for b in buffers))
        settings.append(self.settings.clone())

    monkeypatch.setattr(graph_step.GraphedStep, "__call__", recording)
    configs = [config_lib.load(None, [*TINY, *m, "train.compile=graph"]) for m in MEMBERS]
    trainer.train_pack(configs)
    assert len(seen) == 14 and len(set(seen)) == 1  # one shape, one address, every step
    # multi_op's batches differ in length: the buffers hold the run's longest row
    (inputs_shape,) = {shape for _, shape, _ in seen[0][:1]}
    assert inputs_shape[0] == 2 * 16
    # the schedule reaches the step through the settings: warm-up raises member 0's learning
    # rate step by step, member 1's constant schedule keeps its own
    lrs = torch.stack([s[PLAIN][5] for s in settings])  # lr over beta1's bias correction
    assert lrs[:, 0].unique().numel() == 14 and lrs[1, 1] != lrs[1, 0]
    assert (torch.stack([s[ACTIVE] for s in settings]) == 1).all()


@pytest.mark.parametrize(
    ("device", "compile", "buckets", "mode"),
    [
        ("cuda", "auto", 1, "graph"),
        ("cuda", "auto", 4, False),  # a graph takes one shape: buckets stay eager
        ("cpu", "auto", 1, False),  # no launches to save, padding to pay for
        ("cpu", "graph", 1, "graph"),
        ("cuda", False, 1, False),
        ("cuda", True, 1, True),
    ],
)
def test_compile_auto_is_the_graph_on_cuda_only(device, compile, buckets, mode):
    assert graph_step.step_mode(torch.device(device), compile, buckets) == mode


def test_a_graph_with_length_buckets_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refused:
        config_lib.load(None, ["train.compile=graph", "train.length_buckets=4"])
    message = str(refused.value)
    assert "\n" not in message and message.startswith("train.compile: graph takes one batch")
    assert "length_buckets is 4" in message

"""The CUDA path, checked on a GPU only (``python -m sweeps.bench --gpu`` runs these with
``-m cuda``): bf16 logits against fp32, a pack against its members alone, cached decoding, a
resumed run, a compiled run (CUDA graphs, or length buckets) against the eager one, decoding
at fixed shapes through a captured step against the growing cache. Every test
skips where torch sees no CUDA device; those added on 2026-11-26 passed on an H200 (docs/gpu.md),
the compiled runs' have not run yet."""

from __future__ import annotations

import pytest
import torch

from arith import config as config_lib
from arith.model.gpt import GPT, ModelConfig

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda")


def _model(position: str = "rope") -> GPT:
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=2, d_model=64, n_head=4, position=position)
    return GPT(cfg, vocab_size=16, max_seq_len=24, digit_ids=tuple(range(10))).to(CUDA).eval()


def _config(*sets: str):
    return config_lib.load(
        None,
        [
            "task.n_digits=2",
            "model.n_layer=1",
            "model.d_model=32",
            "model.n_head=2",
            "data.val_size=64",
            "data.test_size=64",
            "data.edge_cases=false",
            "train.max_steps=8",
            "train.eval_every=4",
            "train.batch_size=32",
            "train.train_eval_size=32",
            "train.device=cuda",
            *sets,
        ],
    )


@pytest.mark.parametrize("position", ["rope", "abacus_bias", "learned"])
def test_bf16_logits_match_fp32(position):
    model = _model(position)
    idx = torch.randint(0, 16, (4, 12), device=CUDA)
    with torch.no_grad():
        full, _ = model(idx)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low, _ = model(idx)
    torch.testing.assert_close(low.float(), full, atol=0.05, rtol=0.05)


def test_cached_decoding_matches_full_forward():
    model = _model()
    idx = torch.randint(0, 16, (3, 12), device=CUDA)
    with torch.no_grad():
        full, _ = model(idx)
        logits, cache = model(idx[:, :5])
        pieces = [logits]
        for t in range(5, 12):
            logits, cache = model(idx[:, t : t + 1], cache)
            pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-4, rtol=1e-4)


def test_a_pack_trains_as_its_members_alone(tmp_path):
    from arith.training.trainer import train, train_pack

    configs = [_config(f"train.seed={i}", "train.precision=fp32") for i in range(3)]
    packed = train_pack(configs, checkpoint_dir=tmp_path / "pack")
    for i, (config, member) in enumerate(zip(configs, packed, strict=True)):
        alone = train(config, checkpoint_dir=tmp_path / f"alone{i}")
        assert member["train/loss"] == pytest.approx(alone["train/loss"], rel=1e-3, abs=1e-4)


def test_a_resumed_run_continues_where_it_stopped(tmp_path):
    import shutil

    from arith.training.trainer import train

    config = _config()
    copied = tmp_path / "at_step_4"

    def keep_step_4(metrics):
        if metrics["step"] == 4 and "checkpoint" in metrics:
            shutil.copytree(metrics["checkpoint"], copied)

    full = train(config, keep_step_4, checkpoint_dir=tmp_path / "full")
    resumed = train(config, checkpoint_dir=tmp_path / "resumed", resume_from=copied)
    assert resumed["train/loss"] == pytest.approx(full["train/loss"], rel=1e-3, abs=1e-4)


@pytest.mark.parametrize("buckets", [1, 2], ids=["graphed", "buckets, compiled without graphs"])
def test_a_compiled_run_trains_as_the_eager_one(buckets):
    # train.compile on CUDA: CUDA graphs over one padded length (buckets 1), or compiled without
    # graphs where each bucket's backward adds into .grad (arith.training.trainer.compile_mode):
    # the curves of the eager run, to fp32's rounding under a different kernel order
    from arith.training.trainer import train

    curves = []
    for compiled in ("false", "true"):
        reports: list[dict] = []
        sets = ("train.precision=fp32", f"train.length_buckets={buckets}")
        train(_config(*sets, f"train.compile={compiled}"), reports.append)
        curves.append([(r["step"], r["train/loss"], r.get("val/loss")) for r in reports])
    (eager, graphed) = curves
    assert [s for s, *_ in graphed] == [s for s, *_ in eager]
    for (_, a, va), (_, b, vb) in zip(eager, graphed, strict=True):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5)
        assert (va is None) == (vb is None) and (va is None or vb == pytest.approx(va, rel=1e-4))


@pytest.mark.parametrize(
    ("precision", "sets", "rel"),
    [
        ("fp32", (), 1e-4),
        ("bf16", (), 2e-2),
        ("fp32", ("train.seed=1", "optim.grad_filter=ema", "optim.grad_clip=0.5"), 1e-4),
    ],
    ids=["fp32", "bf16", "grad-filter-clipped"],
)
def test_the_whole_step_as_one_cuda_graph_trains_as_the_eager_one(
    precision, sets, rel, monkeypatch
):
    # train.compile: graph (arith.training.graph_step): three eager steps on a side stream, the
    # fourth captured and every later one replayed, against the eager step: the same curves to
    # the rounding of a different kernel order (bf16: its own rounding)
    from arith.training import graph_step
    from arith.training.trainer import train

    made: list[graph_step.GraphedStep] = []
    init = graph_step.GraphedStep.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(graph_step.GraphedStep, "__init__", keep)
    curves = []
    for compile in ("false", "graph"):
        reports: list[dict] = []
        train(_config(f"train.precision={precision}", f"train.compile={compile}", *sets),
              reports.append)  # fmt: skip
        curves.append([(r["step"], r.get("train/loss"), r.get("val/loss")) for r in reports])
    assert len(made) == 1 and made[0].graph is not None and made[0].calls == 8
    (eager, graphed) = curves
    assert [s for s, *_ in graphed] == [s for s, *_ in eager]
    for (_, a, va), (_, b, vb) in zip(eager, graphed, strict=True):
        for got, want in ((b, a), (vb, va)):
            assert (got is None) == (want is None)
            assert want is None or got == pytest.approx(want, rel=rel, abs=1e-5)


@pytest.mark.parametrize("position", ["rope", "abacus_bias", "learned"])
def test_a_captured_decoding_step_writes_what_greedy_decoding_writes(position):
    # evaluation's decoding at fixed shapes (arith.evaluation.static_decode): the step captured
    # once, replayed for every token of batch after batch, against the growing cache
    from arith.evaluation.decode import greedy_decode
    from arith.evaluation.static_decode import StaticDecoder

    model = _model(position)
    decoder = StaticDecoder(model, rows=8, capacity=32, eos_id=15)
    assert decoder.graph is not None
    for length in (7, 4, 9):
        prompts = torch.randint(0, 16, (8, length), device=CUDA)
        expected = greedy_decode(model, prompts, 16, eos_id=15)
        assert torch.equal(decoder.decode(prompts, 16), expected)
    assert decoder.steps == 3 * 15


def test_evaluation_through_captured_decoding_measures_what_it_measures_without():
    from arith.evaluation.evaluate import evaluate_members
    from arith.evaluation.static_decode import StaticDecoding
    from arith.training.trainer import build_pack

    configs = [_config(f"train.seed={i}", "task.name=multi_op") for i in range(2)]
    members, packed = build_pack(configs, CUDA)
    problems, fmt = members[0].dataset.eval_sets["val"], members[0].dataset.format
    expected = evaluate_members(packed, fmt, problems, CUDA)
    with StaticDecoding() as decoding:
        got = evaluate_members(packed, fmt, problems, CUDA)
        assert all(d.graph is not None for d in decoding.decoders.values())
    for member_got, member_expected in zip(got, expected, strict=True):
        for key, value in member_expected.items():
            assert member_got[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key

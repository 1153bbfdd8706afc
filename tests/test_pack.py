"""Packed trials: members trained together match each trained alone; each stops on its own."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from arith import config as config_lib
from arith.errors import ConfigError
from arith.model.gpt import GPT, ModelConfig
from arith.training import checkpoint as ckpt
from arith.training.optim import OptimConfig, PackedAdamW
from arith.training.trainer import train, train_pack

TINY = [
    "task.n_digits=2",
    "format.name=reversed",
    "model.d_model=16",
    "model.n_layer=1",
    "model.n_head=2",
    "train.batch_size=16",
    "train.max_steps=8",
    "train.eval_every=4",
    "train.train_eval_size=16",
    "train.device=cpu",
    "train.precision=fp32",
    "data.val_size=16",
    "data.test_size=16",
    "data.edge_cases=false",
    "optim.warmup_steps=2",
]

# three members that differ in everything a pack lets vary
MEMBERS = [
    ["optim.lr=1e-3", "train.seed=0"],
    ["optim.lr=3e-3", "optim.weight_decay=0", "optim.schedule=linear", "train.seed=1"],
    ["optim.lr=2e-3", "optim.schedule=constant", "optim.grad_clip=null", "train.seed=2"],
]


def tiny(*overrides: str):
    return config_lib.load(None, [*TINY, *overrides])


def run_pack(configs, **kw):
    reports: list[list[dict]] = [[] for _ in configs]
    summaries = train_pack(configs, lambda i, m: reports[i].append(m), **kw)
    return summaries, reports


def assert_same_curves(packed: list[dict], alone: list[dict]) -> None:
    assert [r["step"] for r in packed] == [r["step"] for r in alone]
    for p, a in zip(packed, alone, strict=True):
        for key in ("train/loss", "val/loss", "val/exact_match", "lr", "test/loss"):
            if key in a:
                assert p[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key


@pytest.mark.parametrize("position", ["learned", "abacus", "abacus_bias"])
def test_a_pack_matches_each_member_trained_alone(position):
    configs = [tiny(*m, f"model.position={position}") for m in MEMBERS]
    summaries, reports = run_pack(configs)
    for config, summary, packed in zip(configs, summaries, reports, strict=True):
        alone: list[dict] = []
        single = train(config, alone.append)
        assert_same_curves(packed, alone)
        assert summary["stopped_reason"] == single["stopped_reason"] == "max_steps"
        assert summary["steps"] == single["steps"] == 8
    # the members really differ: different seeds and learning rates give different curves
    assert reports[0][-1]["train/loss"] != reports[1][-1]["train/loss"]


def test_members_drop_out_at_their_own_rates():
    configs = [tiny("train.seed=0"), tiny("train.seed=1", "model.dropout=0.3")]
    _, reports = run_pack(configs)
    for config, packed in zip(configs, reports, strict=True):
        alone: list[dict] = []
        train(config, alone.append)
        if config.model.dropout == 0:  # its packmate's dropout leaves it exactly as alone
            assert_same_curves(packed, alone)
        else:  # masks come from the pack's RNG: the same rate, other draws
            assert packed[-1]["train/loss"] != alone[-1]["train/loss"]
    assert reports[0][-1]["train/loss"] != reports[1][-1]["train/loss"]


def test_members_of_one_data_seed_share_one_dataset(monkeypatch):
    """One build per data seed in a pack: members 0 and 2 (data.seed 1) share theirs, member 1
    (data.seed 0) gets its own split, and each still trains as it would alone."""
    from arith.data import recent

    built, build = [], recent.build_dataset

    def counted(*args):
        built.append(build(*args))
        return built[-1]

    monkeypatch.setattr(recent, "build_dataset", counted)
    monkeypatch.setattr(recent, "_recent", {})  # no split kept from an earlier test
    configs = [tiny(*m, f"data.seed={seed}") for m, seed in zip(MEMBERS, (1, 0, 1), strict=True)]
    _, reports = run_pack(configs)
    assert len(built) == 2
    shared, own = built
    assert not np.array_equal(shared.eval_sets["val"].keys(), own.eval_sets["val"].keys())
    alone: list[dict] = []
    train(configs[2], alone.append)
    assert_same_curves(reports[2], alone)


def test_a_member_that_stops_stops_alone():
    configs = [
        tiny("train.seed=0"),
        tiny("train.seed=1", "train.target=0.0"),  # reached at the first evaluation
        tiny("train.seed=2", "optim.lr=1e30", "optim.grad_clip=null"),  # diverges
    ]
    summaries, reports = run_pack(configs)
    assert [s["stopped_reason"] for s in summaries] == ["max_steps", "target_reached", "diverged"]
    assert [r["step"] for r in reports[0]] == [0, 4, 8]
    assert [r["step"] for r in reports[1]] == [0] and reports[1][0]["done"] == 1
    assert summaries[2]["steps"] < 8
    alone: list[dict] = []
    train(configs[0], alone.append)
    assert_same_curves(reports[0], alone)  # the others stopping did not disturb member 0


@pytest.mark.parametrize("n_members", [1, 3])
def test_length_buckets_give_the_same_training_with_fewer_pad_tokens(n_members):
    """Micro-batches of alike lengths (a division trace's answers run from 19 to 150 tokens
    here) compute each member's loss and gradient as one padded batch does."""
    division = ["task.name=multi_op", "format.name=carry_trace", "format.division_trace=true"]
    one = [tiny(*division, *m) for m in MEMBERS[:n_members]]
    bucketed = [tiny(*division, *m, "train.length_buckets=4") for m in MEMBERS[:n_members]]
    _, one_reports = run_pack(one)
    _, bucketed_reports = run_pack(bucketed)
    for a, b in zip(bucketed_reports, one_reports, strict=True):
        assert_same_curves(a, b)


def test_length_buckets_cover_every_row_once_in_the_packed_layout():
    from arith.training.step_batch import length_buckets as _length_buckets

    ends = torch.tensor([3, 9, 5, 2, 8, 8, 1, 4])  # two members of four rows
    mask = torch.arange(10)[None, :] < ends[:, None]
    buckets = list(_length_buckets(mask, n_members=2, n_buckets=2))
    # each member's two shortest rows, then its two longest; member 0's rows first in each
    got = [([set(rows[:2].tolist()), set(rows[2:].tolist())], length) for rows, length in buckets]
    assert got == [([{0, 3}, {6, 7}], 4), ([{1, 2}, {4, 5}], 9)]
    assert sum(len(rows) * length for rows, length in buckets) < mask.numel()


@pytest.mark.parametrize("n_members", [1, 3])
def test_a_member_reports_its_share_of_the_throughput_and_the_pack_its_whole(n_members):
    """Every step computes all members' rows (a stopped member's too): the pack's tokens/s is
    n_members times a member's share, and each MFU is its tokens/s x FLOPs per token / peak."""
    configs = [tiny(f"train.seed={i}", "train.peak_flops=1e12") for i in range(n_members)]
    if n_members > 1:  # member 1 stops at step 0 and is still computed
        configs[1] = tiny("train.seed=1", "train.peak_flops=1e12", "train.target=0.0")
    summaries, reports = run_pack(configs)
    flops_per_token = summaries[0]["flops_per_token"]
    for report in reports[0][1:]:
        member, pack = report["perf/tokens_per_s"], report["perf/pack_tokens_per_s"]
        assert pack == pytest.approx(n_members * member, rel=1e-12)
        assert report["perf/mfu"] == pytest.approx(member * flops_per_token / 1e12, rel=1e-12)
        assert report["perf/pack_mfu"] == pytest.approx(pack * flops_per_token / 1e12, rel=1e-12)


def test_a_resumed_pack_continues_exactly(tmp_path):
    configs = [tiny(*m) for m in MEMBERS]
    copied = tmp_path / "at_step_4"

    def keep_step_4(member, metrics):
        if member == 0 and metrics["step"] == 4:
            shutil.copytree(metrics["checkpoint"], copied)

    full = train_pack(configs, keep_step_4, checkpoint_dir=tmp_path / "full")
    resumed, reports = run_pack(configs, checkpoint_dir=tmp_path / "resumed", resume_from=copied)
    assert [[r["step"] for r in member] for member in reports] == [[8]] * 3
    for a, b in zip(full, resumed, strict=True):
        for key in ("train/loss", "val/loss", "test/loss"):
            assert a[key] == b[key], key
    a = ckpt.read(tmp_path / "full")["model"]
    b = ckpt.read(tmp_path / "resumed")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_each_member_keeps_its_own_model_and_best_weights(tmp_path):
    """model.pt per member (best weights with patience, as train() alone keeps them), and a
    member's last weights sliced out of a pack checkpoint when it has no model.pt yet."""
    configs = [tiny(*m) for m in MEMBERS]
    configs[1] = tiny(*MEMBERS[1], "train.patience=5")
    summaries = train_pack(configs, checkpoint_dir=tmp_path / "pack")
    assert [s["final_weights"] for s in summaries] == ["last", "best", "last"]
    alone = train(configs[1], checkpoint_dir=tmp_path / "alone")
    assert summaries[1]["final_weights_step"] == alone["final_weights_step"]
    own = ckpt.read_model(ckpt.member_dir(tmp_path / "pack", 1, 3))
    single = ckpt.read_model(tmp_path / "alone")
    assert (own["weights"], own["step"]) == (single["weights"], single["step"])
    for key, value in single["model"].items():
        assert torch.allclose(own["model"][key], value, rtol=1e-4, atol=1e-5), key

    (ckpt.member_dir(tmp_path / "pack", 2, 3) / ckpt.MODEL_FILE).unlink()
    exported = ckpt.read_model(ckpt.export_model(tmp_path / "pack", tmp_path / "m2", member=2))
    packed = ckpt.read(tmp_path / "pack")["model"]
    assert exported["config"] == configs[2].to_dict() and exported["weights"] == "last"
    assert all(torch.equal(exported["model"][k], packed[k][2:3]) for k in packed)


def test_members_must_share_the_shape():
    with pytest.raises(ConfigError, match=r"model\.d_model"):
        train_pack([tiny(), tiny("model.d_model=32")])


def test_one_member_adamw_is_torch_adamw_with_clipping():
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=1, d_model=16, n_head=2)
    model = GPT(cfg, vocab_size=12, max_seq_len=8)
    reference = GPT(cfg, vocab_size=12, max_seq_len=8)
    reference.load_state_dict(model.state_dict())
    opt = OptimConfig(lr=1e-2, weight_decay=0.1, warmup_steps=0, schedule="constant", grad_clip=0.5)
    packed = PackedAdamW(model, [opt], [10])
    decay = [p for p in reference.parameters() if p.dim() >= 3]
    rest = [p for p in reference.parameters() if p.dim() < 3]
    torch_adamw = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=1e-2,
        betas=opt.betas,
        eps=opt.eps,
        fused=True,
    )
    idx = torch.randint(0, 12, (4, 8))
    for _ in range(3):
        for m in (model, reference):
            m.zero_grad()
            m(idx)[0].square().mean().backward()
        packed.clip_grad_norms([0])
        packed.step([0])
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
        torch_adamw.step()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)

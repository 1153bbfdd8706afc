"""arith.model.kernels, the model's one place for device-specific forms: each CPU form against its
reference (the form every other device takes), values and gradients, and no layer of the model
choosing by device on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from arith.model import kernels
from arith.model.members import member_dropout

MODEL_DIR = Path(__file__).resolve().parents[1] / "arith" / "model"


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 4, 6)])
def test_cpu_embedding_is_f_embedding_values_and_gradients(shape):
    torch.manual_seed(0)
    table = torch.randn(11, 8, requires_grad=True)
    reference_table = table.detach().clone().requires_grad_()
    idx = torch.randint(0, 11, shape)
    idx.view(-1)[:2] = 3  # a row looked up twice: its gradient sums both
    got, expected = kernels.embedding(table, idx), F.embedding(idx, reference_table)
    assert got.shape == (*shape, 8)
    assert torch.equal(got, expected)
    upstream = torch.randn_like(expected)
    got.backward(upstream)
    expected.backward(upstream)
    torch.testing.assert_close(table.grad, reference_table.grad, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    ("n_keys", "autocast", "pays"),
    [(9, False, True), (16, False, False), (64, True, True), (64, False, False)],
)
def test_explicit_attention_on_cpu_where_it_was_measured_faster(n_keys, autocast, pays):
    q = torch.randn(2, 2, 4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        assert kernels.explicit_attention_pays(q, n_keys) is pays


def test_the_meta_device_takes_the_reference_forms():
    # a device that is not the CPU: the fused attention and F.embedding, one path
    q = torch.empty(2, 2, 4, 8, device="meta")
    assert not kernels.explicit_attention_pays(q, 3)
    table = torch.empty(11, 8, device="meta")
    idx = torch.zeros(3, 5, dtype=torch.long, device="meta")
    assert kernels.embedding(table, idx).shape == (3, 5, 8)
    scores = torch.empty(2, 3, 5, device="meta")
    assert kernels.softmax_fp32(scores).shape == (2, 3, 5)


def test_no_layer_of_the_model_chooses_by_device_on_its_own():
    branches = {}
    for path in MODEL_DIR.glob("*.py"):
        if path.name == "kernels.py":
            continue
        text = path.read_text(encoding="utf-8")
        found = re.findall(r"device\.type\s*[!=]=|is_autocast_enabled", text)
        if found:
            branches[path.name] = found
    assert branches == {}


def test_members_dropout_rates_go_to_the_device_once():
    x = torch.ones(4, 3, 5)
    torch.manual_seed(0)
    first = member_dropout(x, (0.0, 0.5), training=True)
    assert (first[:2] == 1).all()  # member 0's block: rate 0
    assert set(first[2:].unique().tolist()) <= {0.0, 2.0}  # member 1's: dropped or scaled
    before = torch.tensor
    calls = []
    torch.tensor = lambda *a, **k: calls.append(a) or before(*a, **k)
    try:
        member_dropout(x, (0.0, 0.5), training=True)
    finally:
        torch.tensor = before
    assert calls == []  # the rates' tensor was made on the first call

"""A step's batch (arith.training.step_batch): a compiled step sees one shape for the whole run
(CUDA graphs are recorded once), padded as the encoder pads, with the loss it had unpadded; and
the compile mode that keeps length buckets correct."""

from __future__ import annotations

import pytest
import torch

from arith import config as config_lib
from arith.training import step_batch
from arith.training.loss import member_loss_sums
from arith.training.trainer import build_pack, compile_mode

CPU = torch.device("cpu")
# multi_op's mixed operations: rows of very different lengths from batch to batch
TINY = [
    "task.name=multi_op",
    "task.n_digits=3",
    "model.d_model=16",
    "model.n_layer=1",
    "model.n_head=2",
    "train.batch_size=8",
    "train.device=cpu",
    "data.val_size=16",
    "data.test_size=16",
    "data.edge_cases=false",
]


def members_of(*overrides: str):
    members, model = build_pack([config_lib.load(None, [*TINY, *overrides])], CPU)
    return members, model


def test_a_compiled_step_sees_one_shape_for_the_whole_run():
    members, _ = members_of()
    length = step_batch.step_length(members)
    shapes = {step_batch.build_batch(members, 1, False, False, length).parts[0][0].shape
              for _ in range(30)}  # fmt: skip
    assert shapes == {(8, length)}
    # as picked (eager): each batch padded to its own longest row, so the lengths vary
    members, _ = members_of()
    eager = {step_batch.build_batch(members, 1, False, True).parts[0][0].shape for _ in range(30)}
    assert len(eager) > 1 and all(shape[1] <= length for shape in eager)


def test_padding_to_the_run_s_length_keeps_the_loss():
    torch.manual_seed(0)
    members, model = members_of()
    state = members[0].batches.state_dict()
    plain = step_batch.build_batch(members, 1, False, False)
    members[0].batches.load_state_dict(state)  # the same rows again
    padded = step_batch.build_batch(members, 1, False, False, step_batch.step_length(members))
    (inputs, _, targets, weights, _), (wide, _, wide_targets, wide_weights, _) = (
        plain.parts[0],
        padded.parts[0],
    )
    assert torch.equal(wide[:, : inputs.shape[1]], inputs) and wide.shape[1] > inputs.shape[1]
    assert (wide[:, inputs.shape[1] :] == members[0].dataset.format.pad_id).all()
    assert torch.equal(padded.token_counts, plain.token_counts)
    model.eval()
    losses = [
        member_loss_sums(model(x)[0], t, w) for x, t, w in
        ((inputs, targets, weights), (wide, wide_targets, wide_weights))
    ]  # fmt: skip
    torch.testing.assert_close(losses[1], losses[0], atol=1e-5, rtol=1e-5)


def test_a_batch_longer_than_the_run_s_length_is_an_error_not_a_cut():
    members, _ = members_of()
    with pytest.raises(ValueError, match="does not fit"):
        step_batch.build_batch(members, 1, False, False, 3)


@pytest.mark.parametrize(
    ("device", "buckets", "mode"),
    [("cuda", 1, "reduce-overhead"), ("cuda", 4, None), ("cpu", 1, None), ("cpu", 4, None)],
)
def test_cuda_graphs_only_without_length_buckets(device, buckets, mode):
    assert compile_mode(torch.device(device), buckets) == mode

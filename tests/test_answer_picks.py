"""A step computes logits only at the tokens its loss keeps, and its loss is what it was when
every token's logits were computed and the mask zeroed the rest."""

from __future__ import annotations

import torch

from arith.model.gpt import GPT, ModelConfig
from arith.training.loss import member_loss_sums
from arith.training.step_batch import answer_picks


def test_picks_are_each_members_kept_tokens_in_order_padded_with_dropped_ones():
    mask = torch.tensor([[0, 1, 0, 1, 1, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0.0]])
    picks = answer_picks(mask)
    assert picks.shape == (3, 3)  # the most any member keeps
    assert picks[0].tolist() == [1, 3, 4]
    assert picks[1, 0].item() == 4
    # padding: tokens the member's mask zeroes, so their weight is 0
    assert mask.gather(1, picks)[1:].tolist() == [[1, 0, 0], [0, 0, 0]]


def test_no_member_keeping_a_token_still_gives_one_pick_of_weight_zero():
    picks = answer_picks(torch.zeros(2, 5))
    assert picks.shape == (2, 1)


def test_loss_on_picked_logits_equals_the_masked_loss_on_every_token():
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=2, d_model=32, n_head=4, position="rope")
    models = [GPT(cfg, vocab_size=16, max_seq_len=24) for _ in range(3)]
    pack = GPT.stack(models)
    M, b, T = 3, 4, 10
    idx = torch.randint(0, 16, (M * b, T))
    targets = torch.randint(0, 16, (M * b, T))
    mask = (torch.rand(M * b, T) < 0.3).float()
    mask[b : 2 * b] = 0.0
    mask[b, 7] = 1.0  # member 1 keeps a single token: padded to the others' counts
    flat_mask, flat_targets = mask.reshape(M, -1), targets.reshape(M, -1)

    every, _ = pack(idx)  # (B, T, vocab)
    full = member_loss_sums(every, flat_targets, flat_mask)
    picks = answer_picks(flat_mask)
    picked = pack.picked_logits(idx, picks)  # (M, n, vocab)
    assert picked.shape == (M, picks.shape[1], 16)
    sums = member_loss_sums(picked, flat_targets.gather(1, picks), flat_mask.gather(1, picks))
    torch.testing.assert_close(sums, full)
    # and the gradients the step takes from it
    grads = []
    for loss in (full, sums):
        pack.zero_grad()
        loss.sum().backward(retain_graph=True)
        grads.append([p.grad.clone() for p in pack.parameters()])
    for with_every, with_picks in zip(*grads, strict=True):
        torch.testing.assert_close(with_picks, with_every)

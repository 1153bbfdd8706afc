"""Greedy decoding at fixed shapes (issue 46, item 1: arith.evaluation.static_decode), checked on
CPU where its step runs eagerly: the static cache gives the growing cache's logits for every
position scheme; a decoder writes what ``greedy_decode`` writes, batch after batch, on the same
tensors; evaluation through it measures what it measures without; a run whose step is the graph
decodes through it, reading nothing back between its looks at whether every row ended. Its
capture as a CUDA graph is checked on a GPU only (tests/test_cuda.py)."""

from __future__ import annotations

import pytest
import torch
from test_host_reads import HostReads
from test_model import check_cached_decoding, tiny
from test_pack import MEMBERS
from test_pack import tiny as tiny_config
from test_pack_eval import pack_and_val_set

from arith.evaluation import decode, static_decode
from arith.evaluation.decode import greedy_decode
from arith.evaluation.evaluate import evaluate_members
from arith.evaluation.static_decode import CHECK_EVERY, StaticDecoder, StaticDecoding
from arith.model.gpt import GPT
from arith.model.kv_cache import StaticKVCache
from arith.training import trainer

DEVICE = torch.device("cpu")
SCHEMES = [
    ("learned", {}),
    ("rope", {"log_length_attention": True}),
    ("abacus", {"input_injection": True}),
    ("abacus_bias", {}),
    ("abacus_bias", {"abacus_bias_window": True, "abacus_bias_values": True}),
    ("none", {}),
]


def model_of(position: str, options: dict) -> GPT:
    torch.manual_seed(0)
    model = tiny(position, **options)
    if options.get("abacus_bias_values"):
        with torch.no_grad():  # they start at zero: give them something to read
            for layer in model.blocks:
                layer.attn.abacus_bias.values.normal_()
    return model


@pytest.mark.parametrize("position, options", SCHEMES)
@torch.no_grad()
def test_a_static_cache_gives_the_growing_caches_logits(position, options):
    model = model_of(position, options)
    cache = StaticKVCache(3, 20, DEVICE)  # longer than the tokens: the rest must stay unseen
    for _ in range(2):  # and again after a reset, on the same buffers
        cache.reset()
        check_cached_decoding(model, cache)
        assert int(cache.length) == 12


@pytest.mark.parametrize("position, options", SCHEMES)
def test_a_decoder_writes_what_greedy_decoding_writes_on_the_same_tensors(position, options):
    model = model_of(position, options)
    prompts = [torch.randint(0, 16, (6, length)) for length in (7, 4, 9)]
    eos = int(greedy_decode(model, prompts[0], 12, eos_id=15)[0, 3])  # one row ends early
    decoder = StaticDecoder(model, rows=6, capacity=24, eos_id=eos)
    tensors, written = [], []
    for batch in prompts:  # prompts of each length after the other, one decoder
        expected = greedy_decode(model, batch, 12, eos_id=eos)
        assert torch.equal(decoder.decode(batch, 12), expected)
        tensors.append(tensors_of(decoder))
        written.append(expected)
    ended = torch.cat(written)[:, -1] == eos
    assert ended.any() and not ended.all()  # rows that ended and rows that did not
    assert tensors[0] == tensors[1] == tensors[2]  # one shape and one address each
    with pytest.raises(ValueError, match="6 rows and 24 positions got 6 prompts of 20 tokens"):
        decoder.decode(torch.zeros(6, 20, dtype=torch.long), 12)


def tensors_of(decoder: StaticDecoder) -> list[tuple]:
    cache = decoder.cache
    every = [decoder.token, decoder.finished, cache.length, cache.digit_run, cache.digit_index]
    every += cache.keys + cache.values
    return [(t.data_ptr(), tuple(t.shape)) for t in every]


def test_a_decoders_steps_read_nothing_back_between_its_looks_at_the_rows():
    model = model_of("rope", {})
    prompts = torch.randint(0, 16, (4, 5))
    decoder = StaticDecoder(model, rows=4, capacity=30, eos_id=99)  # no row ever ends
    counter = HostReads()
    with counter:
        counter.armed = True
        decoder.decode(prompts, 25)
    assert decoder.steps == 24
    # whether every row ended, read at tokens 8, 16 and 24: nothing else
    assert dict(counter.reads) == {"__bool__": 24 // CHECK_EVERY}


@pytest.mark.parametrize(
    "sets",
    [
        ["format.mask_first_n=1"],  # answer tokens fed in after the prompt
        ["task.name=multi_op"],  # prompts of several lengths, answers of very different ones
        ["model.position=abacus_bias", "model.abacus_bias_window=true"],
    ],
    ids=["mask-first", "multi-op", "abacus-bias"],
)
def test_evaluation_at_fixed_shapes_measures_what_it_measures_without(sets, monkeypatch):
    # 3 rows per member a chunk: every group in chunks, the last ones padded to the set's rows
    monkeypatch.setattr(decode, "PACK_ROWS", 9)
    packed, fmt, problems = pack_and_val_set(*sets)
    expected = evaluate_members(packed, fmt, problems, DEVICE)
    with StaticDecoding() as decoding:
        got = evaluate_members(packed, fmt, problems, DEVICE)
        again = evaluate_members(packed, fmt, problems, DEVICE)  # the same decoder, reused
        (decoder,) = decoding.decoders.values()
    assert decoder.rows == 3 * len(MEMBERS) and decoder.steps > 0
    assert got == again
    for member_got, member_expected in zip(got, expected, strict=True):
        assert list(member_got) == list(member_expected)
        for key, value in member_expected.items():
            assert member_got[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("compile, decoded", [("graph", True), ("false", False)])
def test_a_run_whose_step_is_the_graph_decodes_at_fixed_shapes(compile, decoded, monkeypatch):
    calls = []
    decode_fixed = StaticDecoder.decode

    def counted(self, prompts, max_new_tokens):
        calls.append(prompts.shape)
        return decode_fixed(self, prompts, max_new_tokens)

    monkeypatch.setattr(StaticDecoder, "decode", counted)
    config = tiny_config("train.max_steps=4", "train.eval_every=2", f"train.compile={compile}")
    summary = trainer.train(config)
    assert summary["hardware.step"] == ("graph" if decoded else "eager")
    assert bool(calls) == decoded


def test_a_run_keeps_its_most_recently_used_decoders_only(monkeypatch):
    monkeypatch.setattr(static_decode, "KEPT_DECODERS", 2)
    model = model_of("rope", {})
    with StaticDecoding() as decoding:
        first = decoding.decoder(model, rows=4, capacity=10, eos_id=15)
        second = decoding.decoder(model, rows=4, capacity=12, eos_id=15)
        assert decoding.decoder(model, rows=4, capacity=10, eos_id=15) is first  # reused
        third = decoding.decoder(model, rows=4, capacity=14, eos_id=15)  # drops the second
        assert list(decoding.decoders.values()) == [first, third]
        assert decoding.decoder(model, rows=4, capacity=12, eos_id=15) is not second
    assert decoding.decoders == {}  # the run's end frees them

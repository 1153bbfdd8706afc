"""Tests for arith.text.formats: seed literal examples, round trips, loss masks, config errors."""

from __future__ import annotations

import itertools
import re
import time

import numpy as np
import pytest
import torch

from arith import config as config_lib
from arith.errors import ConfigError
from arith.model import positions
from arith.model.positions import abacus_index, digit_run_index
from arith.predict import encode_prompt_text, parse_prompt
from arith.problems import tasks, traces
from arith.problems.tasks import TaskConfig
from arith.text import formats
from arith.text.formats import Encoded, FormatConfig, build_format, longest_digit_run
from arith.training.trainer import train

ARITH_TASKS = {
    "add3": TaskConfig("addition", n_digits=3),
    "add20": TaskConfig("addition", n_digits=20, operand_lengths="bucketed"),
    "add100": TaskConfig("addition", n_digits=100),
    "mul5": TaskConfig("multiplication", n_digits=5, operand_lengths="fixed"),
    "multi3": TaskConfig("multi_op", n_digits=3),
    "mod_add": TaskConfig("modular", operation="add"),
    "mod_sub": TaskConfig("modular", operation="sub"),
    "mod_div": TaskConfig("modular", operation="div"),
}
SORT = TaskConfig("sorting", n_digits=6, max_items=8)
NUMBER_FORMATS = ["plain", "spaced", "reversed", "base100"]


def fmt(name: str, task: TaskConfig, **kw):
    return build_format(FormatConfig(name, **kw), task)


def encode_text(name: str, task: TaskConfig, rows, ops=None) -> list[str]:
    f = fmt(name, task)
    return [f.decode(r) for r in f.encode(tasks.from_ints(task, rows, ops)).tokens]


# -- literal examples ---------------------------------------------------------------------------


def test_carry_trace_seed_004_examples():
    task = TaskConfig("multi_op", n_digits=3)
    rows = [[123, 45], [123, 45], [0, 999], [999, 999], [5, 4]]
    got = encode_text("carry_trace", task, rows, ["+", "*", "-", "*", "//"])
    assert got == [
        "123+  45=+800600100000000000",
        "123*  45=+501302501500000000",
        "  0- 999=-900900900000000000",
        "999* 999=+108017026818909900",
        "  5//  4=+100000000000000000",
    ]


def test_carry_trace_records_subtraction_borrows():
    task = TaskConfig("multi_op", n_digits=3)
    # 794 - 395 = 399: the ones and tens columns borrow; 395 - 794 writes the same, signed -
    got = encode_text("carry_trace", task, [[794, 395], [395, 794]], ["-", "-"])
    assert got == ["794- 395=+901901300000000000", "395- 794=-901901300000000000"]


def test_carry_trace_records_addition_carries():
    task = TaskConfig("addition", n_digits=3)
    (text,) = encode_text("carry_trace", task, [[999, 1]])
    assert text == "999+   1=+001001001100"  # 1000: every column carries into the next


def test_division_trace_example():
    task = TaskConfig("multi_op", n_digits=3)
    f = fmt("carry_trace", task, division_trace=True)
    problems = tasks.from_ints(task, [[865, 145]] * 2, ["//", "%"])
    texts = [f.decode(r) for r in f.encode(problems).tokens]
    # 865 - 145 succeeds 5 times (720, 575, 430, 285, 140), the 6th attempt borrows out of
    # the hundreds: quotient 5, remainder 140 (every number ones digit first)
    trace = ":568000,0002070,1517150,2003040,3518120,4004010,5519191,:041500,"
    assert texts == [f"865//145={trace}+500000000000000000", f"865% 145={trace}+000400100000000000"]
    # other operations write no trace
    assert encode_text("carry_trace", task, [[123, 45]], ["+"]) == ["123+  45=+800600100000000000"]


def read_division_trace(trace: str, a: int, b: int, k: int) -> tuple[int, int]:
    """(quotient, remainder) of the last state line, after checking that every attempt is the
    line above minus b at its place and every state line follows a failed attempt."""
    lines = trace.rstrip(",").split(",")
    number = lambda digits: int(digits[::-1])  # noqa: E731
    assert lines[0] == ":" + str(a).zfill(k)[::-1] + "0" * k
    place, above = k - len(str(b)), a
    for previous, line in itertools.pairwise(lines):
        assert len(line) == 2 * k + 1
        if line[0] == ":":
            assert previous[0] != ":" and previous[-1] == "1"  # after a failed attempt
            assert number(line[1 : k + 1]) == above
            place -= 1
        else:
            difference = above - b * 10**place
            assert number(line[1::2]) == difference % 10**k
            assert line[-1] == str(int(difference < 0))
            if difference >= 0:
                above = difference
    assert place == -1  # every place was tried
    return number(lines[-1][k + 1 :]), number(lines[-1][1 : k + 1])


@pytest.mark.parametrize("seed", range(3))
def test_division_trace_computes_quotient_and_remainder(seed):
    rng = np.random.default_rng(seed)
    task = ARITH_TASKS["multi3"]
    f = fmt("carry_trace", task, division_trace=True)
    a = [0, 999, 999, 5, 100, *rng.integers(0, 1000, 300).tolist()]
    b = [1, 1, 999, 7, 10, *rng.integers(1, 1000, 300).tolist()]
    problems = tasks.from_ints(task, [list(row) for row in zip(a, b, strict=True)], ["//"] * len(a))
    for x, y, text in zip(a, b, f.answer_text(problems), strict=True):
        trace = text[: text.index("+")]  # the answer follows, signed
        assert read_division_trace(trace, x, y, 3) == (x // y, x % y), (x, y, trace)
        # the answer budget max_seq_len reserves: 10 attempts per place, a state line each
        assert len(trace) <= (10 * 3 + 3 + 1) * 8


def test_sign_trace_writes_a_minus_b_with_its_borrows_before_the_answer():
    task = TaskConfig("multi_op", n_digits=3)
    f = fmt("carry_trace", task, sign_trace=True)
    rows = [[165, 163], [163, 165], [794, 395], [123, 45]]
    problems = tasks.from_ints(task, rows, ["-", "-", "-", "+"])
    assert f.answer_text(problems) == [
        "0200000,+200000000000000000",  # 2, no borrow: the sign is +
        "0819191,-200000000000000000",  # 998 = -2 mod 1000, the hundreds borrow out: -
        "0919130,+901901300000000000",
        "+800600100000000000",  # + writes no trace
    ]


# 123 * 45 with mul_trace: 615, 492 and 0 with their carries, 615 + 4920 = 5535, then + 0 * 100
MUL_EXAMPLE = "5511160,4219040,0000000,503051500000,+500300500500000000"


def test_mul_trace_example_round_trips_as_its_docstrings_write_it():
    task = TaskConfig("multi_op", n_digits=3)
    f = fmt("carry_trace", task, mul_trace=True)
    problems = tasks.from_ints(task, [[123, 45], [123, 45]], ["*", "+"])
    assert f.answer_text(problems) == [MUL_EXAMPLE, "+800600100000000000"]  # + writes no trace
    assert MUL_EXAMPLE in formats.__doc__
    assert MUL_EXAMPLE in traces.mul_trace.__doc__.replace(", ", ",")
    assert read_mul_trace(MUL_EXAMPLE, 123, 45, 3) == 5535


def add_columns(x: int, y: int, width: int) -> tuple[list[int], list[int]]:
    """Digits and carries of x + y, ones first, computed the slow, obvious way."""
    digits, carries, carry = [], [], 0
    for m in range(width):
        t = x // 10**m % 10 + y // 10**m % 10 + carry
        digits.append(t % 10)
        carry = t // 10
        carries.append(carry)
    return digits, carries


def read_mul_trace(answer: str, a: int, b: int, k: int) -> int:
    """The product an answer with a mul_trace writes, after checking every line against exact
    arithmetic: partial product j is b_j, then a_i * b_j + carry in per column (digit, carry);
    running sum j adds a * b_j * 10**j to the one before with its column carries; the answer
    (sign, then digit and two-digit carry per column) adds the last partial product."""
    *lines, answer = answer.split(",")
    partials, sums = lines[:k], lines[k:]
    assert len(sums) == max(k - 2, 0)
    a_digits = [a // 10**i % 10 for i in range(k)]
    products = []
    for j, line in enumerate(partials):
        b_j = b // 10**j % 10
        assert len(line) == 2 * k + 1 and line[0] == str(b_j)
        carry = 0
        for i in range(k):
            t = a_digits[i] * b_j + carry
            carry = t // 10
            assert line[1 + 2 * i : 3 + 2 * i] == f"{t % 10}{carry}", (j, i, line)
        products.append(int(line[1::2][::-1]) + carry * 10**k)  # the last carry: the top digit
        assert products[-1] == a * b_j
    assert answer[0] == "+"
    additions = [([int(d) for d in line[0::2]], [int(c) for c in line[1::2]]) for line in sums]
    carries = [int(answer[i : i + 2]) for i in range(2, len(answer), 3)]
    additions.append(([int(d) for d in answer[1::3]], carries))
    total = products[0]
    for j, (digits, carries) in enumerate(additions, start=1):
        assert len(digits) == len(carries) == 2 * k
        addend = products[j] * 10**j if j < k else 0  # k = 1: the answer is a * b_0
        assert (digits, carries) == add_columns(total, addend, 2 * k), (j, digits, carries)
        total += addend
    return total


@pytest.mark.parametrize(
    "task",
    [*(TaskConfig("multi_op", n_digits=k) for k in (1, 2, 3, 4)), ARITH_TASKS["mul5"]],
    ids=lambda t: f"{t.name}{t.n_digits}",
)
def test_mul_trace_writes_partial_products_and_running_sums(task):
    k = task.n_digits
    f = fmt("carry_trace", task, mul_trace=True)
    rng = np.random.default_rng(k)
    nines = 10**k - 1
    a = [0, nines, nines, 10 ** (k - 1), 7, *rng.integers(0, 10**k, 300).tolist()]
    b = [nines, nines, 1, 10 ** (k - 1), 0, *rng.integers(0, 10**k, 300).tolist()]
    problems = tasks.from_ints(task, [list(row) for row in zip(a, b, strict=True)], ["*"] * len(a))
    for x, y, text in zip(a, b, f.answer_text(problems), strict=True):
        assert read_mul_trace(text, x, y, k) == x * y, (x, y, text)
    enc = f.encode(problems)
    assert enc.tokens.shape[1] == f.max_seq_len()  # every * row is as long as the longest
    assert (enc.prompt_len + enc.answer_len == f.max_seq_len()).all()
    assert f.max_seq_len() - fmt("carry_trace", task).max_seq_len() == traces.max_mul_trace_len(k)


def test_mul_trace_rows_decode_and_encode_back_to_their_tokens():
    task = ARITH_TASKS["multi3"]
    f = fmt("carry_trace", task, mul_trace=True, division_trace=True, sign_trace=True)
    problems = tasks.sample(task, 300, np.random.default_rng(6))
    enc = f.encode(problems)
    assert enc.tokens.shape[1] <= f.max_seq_len()
    operands, _ = tasks.to_ints(problems)
    symbols = tasks.op_symbols(task)
    for row, n, (a, b), op in zip(
        enc.tokens, enc.prompt_len + enc.answer_len, operands, problems.op, strict=True
    ):
        text = f.decode(row)
        assert [*f.text_ids(text), f.eos_id] == row[:n].tolist()
        prompt, answer = text.split("=")
        assert parse_prompt(f, prompt + "=") == ([a, b], symbols[op])
        if symbols[op] == "*":
            assert read_mul_trace(answer, a, b, 3) == a * b
    # the 3-digit lengths: 29 tokens for a * row without the trace, 66 with it
    assert (
        fmt("carry_trace", task).max_seq_len(),
        fmt("carry_trace", task, mul_trace=True).max_seq_len(),
    ) == (29, 66)


def test_mul_trace_lifts_the_two_digit_carry_limit():
    """Its carries are at most 8 (a partial product) and 1 (a sum): 12-digit * builds with it."""
    task = TaskConfig("multiplication", n_digits=12)
    with pytest.raises(ConfigError, match="carries up to 107"):
        fmt("carry_trace", task)
    f = fmt("carry_trace", task, mul_trace=True)
    nines = 10**12 - 1
    (text,) = f.answer_text(tasks.from_ints(task, [[nines, nines]]))
    assert read_mul_trace(text, nines, nines, 12) == nines * nines


@pytest.mark.parametrize("key", ["division_trace", "sign_trace", "mul_trace"])
def test_traces_need_carry_trace(key):
    with pytest.raises(ConfigError, match=rf"format\.{key}"):
        FormatConfig("plain", **{key: True})


def test_plain_spaced_reversed_base100_examples():
    add = TaskConfig("addition", n_digits=4)
    assert encode_text("plain", add, [[1234, 5678]]) == ["1234 + 5678 =6912"]
    assert encode_text("spaced", add, [[1234, 5678]]) == ["1 234 + 5 678=6 912"]
    assert encode_text("reversed", add, [[321, 54]]) == ["123+45=573"]
    multi = TaskConfig("multi_op")
    assert encode_text("plain", multi, [[123, 45], [0, 999]], ["*", "-"]) == [
        "123 * 45 =5535",
        "0 - 999 =-999",
    ]
    assert encode_text("plain", TaskConfig("modular"), [[20, 74]]) == ["20 + 74 =94"]
    f = fmt("base100", TaskConfig())
    enc = f.encode(tasks.from_ints(TaskConfig(), [[123, 456]]))
    v = f.vocab.index
    assert enc.tokens.tolist() == [[1, 23, v("+"), 4, 56, v("="), 5, 79, f.eos_id]]
    digits = tasks.from_ints(TaskConfig(n_digits=4), [[1234, 999], [0, 5]])
    assert f.encode(digits).tokens[:, :2].tolist() == [[12, 34], [0, v("+")]]
    assert f.encode(digits).tokens[0, 3:5].tolist() == [9, 99]


def test_sorting_examples():
    rows = [[89850, 1, 210273]]
    assert encode_text("plain", SORT, rows) == ["a:89850,b:1,c:210273=bac"]
    assert encode_text("reversed", SORT, rows) == ["a:05898,b:1,c:372012=bac"]
    assert encode_text("spaced", SORT, rows) == ["a:89 850,b:1,c:210 273=bac"]


# -- round trips --------------------------------------------------------------------------------


def parse_number_text(name: str, text: str) -> tuple[int, str, int, int]:
    """plain/spaced/reversed/base100 text -> (a, op, b, signed answer)."""
    compact = "".join(text.split())
    m = re.fullmatch(r"(\d+)(//|[-+*/%])(\d+)=(-?)(\d+)", compact)
    assert m, text
    a, op, b, sign, c = m.groups()
    if name == "reversed":
        a, b, c = a[::-1], b[::-1], c[::-1]
    return int(a), op, int(b), -int(c) if sign else int(c)


def parse_carry_trace(text: str, width: int) -> tuple[int, str, int, int, list[int]]:
    """carry_trace text -> (a, op, b, signed answer, carries LSB first)."""
    a, op, b = text[:width], text[width : width + 2], text[width + 2 : 2 * width + 2]
    assert text[2 * width + 2] == "="
    sign, trace = text[2 * width + 3], text[2 * width + 4 :]
    digits = [int(trace[i]) for i in range(0, len(trace), 3)]
    carries = [int(trace[i + 1 : i + 3]) for i in range(0, len(trace), 3)]
    c = int("".join(map(str, digits[::-1])))
    return int(a), op.strip(), int(b), -c if sign == "-" else c, carries


def python_carries(a: int, b: int, op: str, r: int) -> list[int]:
    """Column carries computed the slow, obvious way."""
    da = [int(x) for x in str(a)[::-1]]
    db = [int(x) for x in str(b)[::-1]]
    carries, carry = [], 0
    for col in range(r):
        if op == "-":  # the borrows of |a - b|, larger minus smaller
            big, small = (da, db) if a >= b else (db, da)
            t = (big[col] if col < len(big) else 0) - (small[col] if col < len(small) else 0)
            carry = int(t - carry < 0)
            carries.append(carry)
            continue
        if op == "+":
            s = (da[col] if col < len(da) else 0) + (db[col] if col < len(db) else 0)
        elif op == "*":
            s = sum(da[i] * db[col - i] for i in range(len(da)) if 0 <= col - i < len(db))
        else:
            return [0] * r
        carry = (s + carry) // 10
        carries.append(carry)
    return carries


@pytest.mark.parametrize("name", NUMBER_FORMATS)
@pytest.mark.parametrize("key", list(ARITH_TASKS))
def test_round_trip_number_formats(name, key):
    task = ARITH_TASKS[key]
    f = fmt(name, task)
    problems = tasks.sample(task, 300, np.random.default_rng(1))
    enc = f.encode(problems)
    operands, answers = tasks.to_ints(problems)
    symbols = tasks.op_symbols(task)
    for row, (a, b), c, op in zip(enc.tokens, operands, answers, problems.op, strict=True):
        assert parse_number_text(name, f.decode(row)) == (a, symbols[op], b, c)
    assert enc.tokens.shape[1] <= f.max_seq_len()


@pytest.mark.parametrize("key", [k for k in ARITH_TASKS if k != "add100"])
def test_round_trip_carry_trace(key):
    task = ARITH_TASKS[key]
    f = fmt("carry_trace", task)
    problems = tasks.sample(task, 300, np.random.default_rng(2))
    enc = f.encode(problems)
    assert enc.tokens.shape[1] == f.max_seq_len()  # fixed width
    width = tasks.operand_width(task)
    r = tasks.max_answer_digits(task)
    operands, answers = tasks.to_ints(problems)
    symbols = tasks.op_symbols(task)
    for row, (a, b), c, op in zip(enc.tokens, operands, answers, problems.op, strict=True):
        pa, pop, pb, pc, carries = parse_carry_trace(f.decode(row), width)
        assert (pa, pop, pb, pc) == (a, symbols[op], b, c)
        expected = [0] * r if task.name == "modular" else python_carries(a, b, pop, r)
        assert carries == expected


@pytest.mark.parametrize("name", ["plain", "spaced", "reversed"])
def test_round_trip_sorting(name):
    f = fmt(name, SORT)
    problems = tasks.sample(SORT, 300, np.random.default_rng(3))
    operands, _ = tasks.to_ints(problems)
    for row, values in zip(f.encode(problems).tokens, operands, strict=True):
        prompt, answer = "".join(f.decode(row).split()).split("=")
        items = dict(item.split(":") for item in prompt.split(","))
        parsed = [int(v[::-1] if name == "reversed" else v) for v in items.values()]
        assert list(items) == [chr(ord("a") + i) for i in range(len(values))]
        assert parsed == values
        order = sorted(range(len(values)), key=lambda i: (values[i], i))
        assert answer == "".join(chr(ord("a") + i) for i in order)


def test_length_generalisation_encodes_wider_operands():
    task = TaskConfig("multi_op", n_digits=3)
    problems = tasks.sample(task, 200, np.random.default_rng(4), n_digits=(4, 6))
    operands, answers = tasks.to_ints(problems)
    f = fmt("plain", task)
    enc = f.encode(problems)
    assert enc.tokens.shape[1] <= f.max_seq_len(n_digits=6)
    for row, (a, b), c in zip(enc.tokens, operands, answers, strict=True):
        parsed = parse_number_text("plain", f.decode(row))
        assert (parsed[0], parsed[2], parsed[3]) == (a, b, c)
    trace = fmt("carry_trace", task)
    texts = [trace.decode(r) for r in trace.encode(problems).tokens]
    assert all(parse_carry_trace(t, 6)[3] == c for t, c in zip(texts, answers, strict=True))


def test_max_seq_len_tight_for_addition_and_multiplication():
    for task in [TaskConfig("addition", n_digits=7), TaskConfig("multiplication", n_digits=4)]:
        nines = 10**task.n_digits - 1
        worst = tasks.from_ints(task, [[nines, nines]])
        for name in [*NUMBER_FORMATS, "carry_trace"]:
            f = fmt(name, task)
            assert f.encode(worst).tokens.shape[1] == f.max_seq_len(), name
    f = fmt("plain", SORT)
    worst = tasks.from_ints(SORT, [[999999] * 8])
    assert f.encode(worst).tokens.shape[1] == f.max_seq_len()


# -- masks, text helpers ------------------------------------------------------------------------


def test_loss_mask_covers_answer_and_eos_only():
    task = ARITH_TASKS["multi3"]
    f = fmt("plain", task)
    enc = f.encode(tasks.sample(task, 500, np.random.default_rng(5)))
    assert isinstance(enc, Encoded)
    n, t = enc.tokens.shape
    mask = enc.loss_mask()
    assert mask.shape == (n, t - 1)
    target_pos = np.arange(1, t)[None, :]
    prompt = target_pos < enc.prompt_len[:, None]
    answer = ~prompt & (target_pos < (enc.prompt_len + enc.answer_len)[:, None])
    assert not mask[prompt].any() and mask[answer].all() and not mask[~prompt & ~answer].any()
    assert (mask.sum(axis=1) == enc.answer_len).all()
    eos_pos = enc.prompt_len + enc.answer_len - 1
    assert (enc.tokens[np.arange(n), eos_pos] == f.eos_id).all()
    assert mask[np.arange(n), eos_pos - 1].all()  # EOS is a target
    shifted = enc.loss_mask(mask_first_n=2)
    assert (shifted.sum(axis=1) == enc.answer_len - 2).all()
    # Target index p predicts token p + 1: the first two answer tokens are skipped.
    assert not shifted[np.arange(n), enc.prompt_len - 1].any()
    assert not shifted[np.arange(n), enc.prompt_len].any()
    longer = np.flatnonzero(enc.answer_len > 2)
    assert len(longer) > 100
    assert shifted[longer, enc.prompt_len[longer] + 1].all()


@pytest.mark.parametrize("name", ["plain", "spaced", "reversed", "carry_trace", "base100"])
def test_answer_text_and_prompt_text(name):
    task = ARITH_TASKS["multi3"]
    f = fmt(name, task)
    problems = tasks.sample(task, 50, np.random.default_rng(6))
    enc = f.encode(problems)
    texts = f.answer_text(problems)
    for row, start, text in zip(enc.tokens, enc.prompt_len, texts, strict=True):
        full = f.decode(row)
        prompt = f.decode(row[:start])
        assert full == prompt + text
        assert encode_prompt_text(f, prompt) == row[:start].tolist()
    assert all(t == f.normalise(t) or name == "spaced" for t in texts)
    assert all(i < len(f.vocab) for i in enc.tokens.ravel())


def test_answer_text_examples():
    multi = TaskConfig("multi_op")
    p = tasks.from_ints(multi, [[0, 999], [999, 999]], ["-", "*"])
    assert fmt("base100", multi).answer_text(p) == ["-999", "998001"]
    assert fmt("spaced", multi).answer_text(p) == ["-999", "998 001"]
    assert fmt("spaced", multi).normalise(" 998 001\n") == "998001"
    assert fmt("plain", SORT).answer_text(tasks.from_ints(SORT, [[3, 1, 2]])) == ["bca"]


def test_encode_prompt_text_rejects_unknown_characters():
    with pytest.raises(ValueError, match="vocabulary"):
        encode_prompt_text(fmt("plain", TaskConfig()), "12 & 3 =")
    with pytest.raises(ValueError, match="vocabulary"):
        encode_prompt_text(fmt("base100", TaskConfig()), "12 ^ 3 =")
    f = fmt("base100", TaskConfig())
    assert encode_prompt_text(f, "12345 + 6 =") == [1, 23, 45, 100, 6, 106]


def test_vocab_ids():
    plain = fmt("plain", TaskConfig())
    assert [plain.vocab[i] for i in plain.digit_ids] == list("0123456789")
    assert plain.vocab[plain.pad_id] == "<pad>" and plain.vocab[plain.eos_id] == "<eos>"
    assert plain.vocab == fmt("reversed", SORT).vocab  # fixed per format, not per data
    b100 = fmt("base100", TaskConfig())
    assert len(b100.digit_ids) == 100 and b100.vocab[99] == "99"
    assert b100.vocab[b100.pad_id] == "<pad>" and b100.vocab[b100.eos_id] == "<eos>"
    assert plain.decode([1, plain.pad_id, 2, plain.eos_id, 3]) == "12"


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "task"),
    [
        ("carry_trace", SORT),
        ("base100", SORT),
        ("carry_trace", TaskConfig("multiplication", n_digits=12)),
    ],
)
def test_impossible_combinations(name, task):
    with pytest.raises(ConfigError) as err:
        fmt(name, task)
    assert err.value.path == "format.name"


def test_carry_trace_allows_11_digit_multiplication():
    task = TaskConfig("multiplication", n_digits=11)
    f = fmt("carry_trace", task)
    nines = 10**11 - 1
    text = f.decode(f.encode(tasks.from_ints(task, [[nines, nines]])).tokens[0])
    assert parse_carry_trace(text, 11)[3] == nines * nines


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [({"name": "binary"}, "format.name"), ({"mask_first_n": -1}, "format.mask_first_n")],
)
def test_bad_format_config(kwargs, path):
    with pytest.raises(ConfigError) as err:
        FormatConfig(**kwargs)
    assert err.value.path == path


# -- speed --------------------------------------------------------------------------------------


def test_sample_and_encode_100k_speed():
    task = TaskConfig("addition", n_digits=3)
    f = fmt("plain", task)
    start = time.perf_counter()
    enc = f.encode(tasks.sample(task, 100_000, np.random.default_rng(7)))
    elapsed = time.perf_counter() - start
    print(f"\nsample + encode 100k 3-digit additions (plain): {elapsed * 1000:.0f} ms")
    assert enc.tokens.shape[0] == 100_000


PROMPT_CASES = [
    (TaskConfig(name="addition", n_digits=3), "plain"),
    (TaskConfig(name="addition", n_digits=3), "spaced"),
    (TaskConfig(name="addition", n_digits=3), "reversed"),
    (TaskConfig(name="addition", n_digits=3), "base100"),
    (TaskConfig(name="multi_op", n_digits=3), "carry_trace"),
    (TaskConfig(name="modular", modulus=97, operation="div"), "plain"),
    (TaskConfig(name="sorting", n_digits=3), "plain"),
]


@pytest.mark.parametrize(("task", "name"), PROMPT_CASES, ids=lambda x: getattr(x, "name", x))
def test_a_typed_prompt_parses_back_to_its_problem(task, name):
    fmt = build_format(FormatConfig(name=name), task)
    example = fmt.example_prompt()
    operands, op = parse_prompt(fmt, example)
    problem = tasks.from_ints(task, [operands], [op])
    encoded = fmt.encode(problem)
    assert fmt.decode(encoded.tokens[0, : encoded.prompt_len[0]].tolist()) == example
    for bad in ("hello", "", "=", example.replace("=", "")):
        with pytest.raises(ValueError, match="not a problem of the model's task"):
            parse_prompt(fmt, bad)


def test_reversed_prompts_are_read_least_significant_digit_first():
    fmt = build_format(FormatConfig(name="reversed"), TaskConfig(name="addition", n_digits=3))
    assert parse_prompt(fmt, "123+45=") == ([321, 54], "+")


# -- Abacus rows --------------------------------------------------------------------------------


def _longest_written_run(f, problems) -> int:
    """Longest run of digit tokens in the encoded rows, counted as the model counts them."""
    tokens = torch.from_numpy(f.encode(problems).tokens)
    is_digit = torch.isin(tokens, torch.tensor(f.digit_ids))
    return int(digit_run_index(is_digit, tokens.new_zeros(len(tokens))).max())


@pytest.mark.parametrize(
    ("name", "task", "run"),
    [
        ("reversed", TaskConfig("multiplication", n_digits=10), 20),
        ("carry_trace", TaskConfig("addition", n_digits=10), 33),
        ("plain", TaskConfig("addition", n_digits=3), 4),
        ("spaced", TaskConfig("addition", n_digits=7), 3),
        ("carry_trace", TaskConfig("multi_op", n_digits=2), 12),
        ("reversed", TaskConfig("modular", modulus=97), 2),
        ("plain", SORT, 6),
    ],
)
def test_longest_digit_run_is_what_the_format_writes(name, task, run):
    assert longest_digit_run(FormatConfig(name), task) == run
    nines = 10**task.n_digits - 1
    if task.name == "sorting":
        worst = tasks.from_ints(task, [[999999] * 8])
    elif task.name == "modular":
        worst = tasks.from_ints(task, [[96, 96]])
    else:
        ops = ["*"] if task.name == "multi_op" else None
        worst = tasks.from_ints(task, [[nines, nines]], ops)
    sample = tasks.sample(task, 300, np.random.default_rng(0))
    f = fmt(name, task)
    assert _longest_written_run(f, sample) <= run
    assert _longest_written_run(f, worst) == run


@pytest.mark.parametrize(
    "overrides",
    [
        ["format.name=carry_trace", "task.n_digits=10", "model.abacus_max_k=32"],
        [
            "format.name=reversed",
            "task.name=multiplication",
            "task.n_digits=10",
            "model.abacus_max_k=19",
        ],
        [
            "format.name=reversed",
            "task.n_digits=10",
            "data.longer_n_digits=[11, 45]",
            "model.abacus_max_k=40",
        ],
    ],
)
def test_an_abacus_table_without_a_row_for_every_digit_is_refused(overrides):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, ["model.position=abacus", *overrides])
    assert err.value.path == "model.abacus_max_k"
    assert "\n" not in str(err.value)
    # the same sizes fit without Abacus positions
    config_lib.load(None, overrides)


def test_training_offsets_keep_every_digit_inside_the_abacus_table(monkeypatch):
    # reversed 3-digit multiplication writes 6-digit answers: offsets from k alone reached row 8
    rows: list[int] = []

    def recording(run, offset):
        index = abacus_index(run, offset)
        rows.append(int(index.max()))
        return index

    monkeypatch.setattr(positions, "abacus_index", recording)
    cfg = config_lib.load(
        None,
        [
            "task.name=multiplication",
            "format.name=reversed",
            "model.position=abacus",
            "model.abacus_max_k=7",
            "model.d_model=16",
            "model.n_layer=1",
            "train.batch_size=64",
            "train.max_steps=6",
            "train.eval_every=6",
            "train.train_eval_size=8",
            "data.val_size=8",
            "data.test_size=8",
        ],
    )
    train(cfg)
    assert 6 <= max(rows) <= 7

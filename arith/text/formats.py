"""How problems become token sequences: prompt + answer + EOS, right-padded with PAD.

Five formats, each with one literal example (prompt -> answer):

- ``plain`` (seed 000): ``"1234 + 5678 ="`` -> ``"6912"``
- ``spaced`` (seed 000's OOD form): ``"1 234 + 5 678="`` -> ``"6 912"``
- ``reversed`` (seed 001): 321 + 54 -> ``"123+45="`` -> ``"573"``
- ``carry_trace`` (seed 004): 123 * 45 -> ``"123*  45="`` -> ``"+501302501500000000"``;
  with ``mul_trace`` -> ``"5511160,4219040,0000000,503051500000,+500300500500000000"``
- ``base100`` (seed 002): 123 + 456 -> ``[1, 23, "+", 4, 56, "="]`` -> ``[5, 79]``

Encoding is vectorised: every part of a row (operand digits, operator, ...) is a segment of
tokens with per-row lengths, laid end to end by arith.text._segments.assemble. numpy only.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

import numpy as np

from arith.errors import require
from arith.problems import _digits, traces
from arith.problems.tasks import Problems, TaskConfig, max_answer_digits, op_symbols, operand_width
from arith.text import _scratchpad
from arith.text import _segments as seg

# Character formats share one vocabulary; token id == digit value for "0".."9".
LETTERS = "abcdefghijklmnopqrstuvwxyz"
CHAR_VOCAB: tuple[str, ...] = (*"0123456789", *" +-*/%=:,", *LETTERS, "<pad>", "<eos>")
# base100: token id == value for "00".."99", then operators, "=", PAD, EOS.
BASE100_VOCAB: tuple[str, ...] = (
    *(f"{i:02d}" for i in range(100)),
    *("+", "-", "*", "//", "%", "/", "="),
    "<pad>",
    "<eos>",
)
# carry_trace writes each carry as two digits.
MAX_TRACE_CARRY = 99


@dataclass(frozen=True)
class FormatConfig:
    """How problems are written as tokens (the ``format:`` section of a run config)."""

    # The text form (see the module docstring for one example each).
    name: Literal["plain", "spaced", "reversed", "carry_trace", "base100"] = "plain"
    # Exclude the first N answer tokens from the loss (seed 003's --mask_first_n).
    mask_first_n: int = 0
    # carry_trace only: write // and % as restoring long division before the answer
    # (arith.problems.traces.division_trace); seed 004 writes no trace for them.
    division_trace: bool = False
    # carry_trace only: write a - b ones digit first with each column's borrow before the
    # answer of -, so its sign is the last borrow (arith.problems.traces.sign_trace).
    sign_trace: bool = False
    # carry_trace only: write a * b as its partial products a * b_j and their running sums
    # before the answer of *, whose carries become the last sum's (traces.mul_trace): 123 * 45
    # writes 5511160,4219040,0000000,503051500000,+500300500500000000 (615, 492, 0, 5535).
    mul_trace: bool = False

    def __post_init__(self) -> None:
        allowed = typing.get_args(typing.get_type_hints(FormatConfig)["name"])
        require(
            self.name in allowed, "format.name", f"expected one of {allowed}, but got {self.name!r}"
        )
        m = self.mask_first_n
        require(
            isinstance(m, int) and not isinstance(m, bool) and m >= 0,
            "format.mask_first_n",
            f"expected an integer >= 0, but got {m!r}",
        )
        for key in _scratchpad.TRACES:
            value = getattr(self, key)
            require(
                isinstance(value, bool),
                f"format.{key}",
                f"expected true or false, but got {value!r}",
            )
            require(
                not value or self.name == "carry_trace",
                f"format.{key}",
                f"only carry_trace writes this trace, but format.name is {self.name!r}",
            )


@dataclass
class Encoded:
    """Token rows: ``tokens`` (N, T) int64 = prompt + answer + EOS, right-padded with PAD.

    ``answer_len`` includes EOS. For plain ``"1 + 2 =3<eos>"``: prompt_len 5, answer_len 2.
    """

    tokens: np.ndarray
    prompt_len: np.ndarray
    answer_len: np.ndarray

    def loss_mask(self, mask_first_n: int = 0) -> np.ndarray:
        """(N, T-1) bool over targets ``tokens[:, 1:]``: True on answer tokens (EOS included),
        skipping the first ``mask_first_n`` of them.
        """
        target_pos = np.arange(1, self.tokens.shape[1])[None, :]
        start = (self.prompt_len + mask_first_n)[:, None]
        end = (self.prompt_len + self.answer_len)[:, None]
        return (target_pos >= start) & (target_pos < end)


def build_format(fmt: FormatConfig, task: TaskConfig) -> Format:
    """The :class:`Format` for ``fmt`` and ``task``; ConfigError on impossible combinations."""
    if fmt.name in ("carry_trace", "base100"):
        require(
            task.name != "sorting",
            "format.name",
            f"{fmt.name!r} writes arithmetic results and cannot encode the sorting task",
        )
    if fmt.name == "carry_trace" and "*" in op_symbols(task) and not fmt.mul_trace:
        carry = traces.max_mul_carry(task.n_digits)
        require(
            carry <= MAX_TRACE_CARRY,
            "format.name",
            f"carry_trace writes two-digit carries, but {task.n_digits}-digit multiplication "
            f"carries up to {carry}",
        )
    return Format(fmt, task)


def longest_digit_run(fmt: FormatConfig, task: TaskConfig, n_digits: int | None = None) -> int:
    """Longest run of consecutive digit tokens the format writes (``n_digits`` overrides k).

    Abacus positions index a digit within its run, so this is the table entries a problem needs:
    reversed 10-digit multiplication writes 20 answer digits, carry_trace writes three digits
    per answer digit (31 digits for 10-digit addition); spaced breaks runs after three digits.
    """
    k = operand_width(task, n_digits)
    widest = k if task.name == "sorting" else max(k, max_answer_digits(task, k))
    if fmt.name == "carry_trace":
        return max(k, 3 * max_answer_digits(task, k))
    if fmt.name == "spaced":
        return min(3, widest)
    if fmt.name == "base100":
        return (widest + 1) // 2
    return widest


def check_abacus_table(
    fmt: FormatConfig, task: TaskConfig, abacus_max_k: int, longest_operand: int
) -> None:
    """ConfigError unless the Abacus table has an entry for every digit index of every set: a
    digit past ``abacus_max_k`` would share the last entry with every other one."""
    run = longest_digit_run(fmt, task, longest_operand)
    require(
        run <= abacus_max_k,
        "model.abacus_max_k",
        f"must be >= {run}, the longest run of digits {fmt.name} writes for "
        f"{longest_operand}-digit {task.name}, but got {abacus_max_k}",
    )


class Format:
    """Encodes :class:`Problems` of one task in one text form, and decodes token ids back to text.

    Build it with :func:`build_format`. ``vocab`` is fixed per format (all tasks share it).
    """

    def __init__(self, config: FormatConfig, task: TaskConfig) -> None:
        self.config = config
        self.task = task
        self.vocab = BASE100_VOCAB if config.name == "base100" else CHAR_VOCAB
        self.token_ids = {t: i for i, t in enumerate(self.vocab)}
        self.pad_id = self.token_ids["<pad>"]
        self.eos_id = self.token_ids["<eos>"]
        self.digit_ids = tuple(range(100 if config.name == "base100" else 10))
        self.trace_keys = tuple(key for key in _scratchpad.TRACES if getattr(config, key))

    # -- encoding ------------------------------------------------------------------------------

    def encode(self, problems: Problems) -> Encoded:
        """Prompt + answer + EOS for every problem, vectorised."""
        n = len(problems)
        if self.config.name == "carry_trace":
            prompt, answer = self._carry_trace(problems)
        elif self.task.name == "sorting":
            prompt, answer = self._sorting(problems)
        else:
            prompt, answer = self._arithmetic(problems)
        answer = [*answer, seg.const(n, [self.eos_id])]
        tokens, _ = seg.assemble(prompt + answer, self.pad_id)
        return Encoded(tokens, seg.total_len(prompt), seg.total_len(answer))

    def _number(self, digits: np.ndarray, lens: np.ndarray) -> seg.Segment:
        """One number per row in this format's form (digits right-aligned MSB first, as stored).

        plain 1234 -> "1234"; reversed -> "4321"; spaced -> "1 234"; base100 -> [12, 34].
        """
        lsb = digits[:, ::-1].astype(np.int64)  # least-significant first, left-aligned
        name = self.config.name
        if name == "reversed":
            return lsb, lens
        if name == "spaced":
            # LSB first, a space after every third digit; then reverse each row's prefix.
            pos = np.arange(lsb.shape[1] + max(lsb.shape[1] - 1, 0) // 3)
            spaced = np.where(pos % 4 == 3, self.token_ids[" "], lsb[:, pos - pos // 4])
            return seg.reverse_prefix(spaced, lens + np.maximum(lens - 1, 0) // 3)
        if name == "base100":
            if lsb.shape[1] % 2:
                lsb = np.pad(lsb, ((0, 0), (0, 1)))
            pairs = lsb[:, 0::2] + 10 * lsb[:, 1::2]  # 2-digit groups from the right
            return seg.reverse_prefix(pairs, (lens + 1) // 2)
        return seg.reverse_prefix(lsb, lens)

    def text_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` in a character format, one per character."""
        return [self.token_ids[c] for c in text]

    def _arithmetic(self, p: Problems) -> tuple[list[seg.Segment], list[seg.Segment]]:
        """``a op b =`` -> ``[-]c`` for plain, spaced, reversed and base100."""
        n, name = len(p), self.config.name
        symbols = op_symbols(self.task)
        if name == "base100":
            ops = [[self.token_ids[s]] for s in symbols]
        else:
            ops = [self.text_ids(f" {s} " if name in ("plain", "spaced") else s) for s in symbols]
        equals = self.text_ids(" =" if name == "plain" else "=")
        prompt = [
            self._number(p.operands[:, 0], p.operand_len[:, 0]),
            seg.choose(p.op, ops),
            self._number(p.operands[:, 1], p.operand_len[:, 1]),
            seg.const(n, equals),
        ]
        sign = seg.const(n, [self.token_ids["-"]], p.answer_negative)
        return prompt, [sign, self._number(p.answer, p.answer_len)]

    def _sorting(self, p: Problems) -> tuple[list[seg.Segment], list[seg.Segment]]:
        """``a:89850,b:1,c:210273=`` -> ``bac`` (absent items write nothing)."""
        n, m = p.operand_len.shape
        prompt: list[seg.Segment] = []
        for i in range(m):
            present = p.operand_len[:, i] > 0
            if i:
                prompt.append(seg.const(n, self.text_ids(","), present))
            prompt.append(seg.const(n, self.text_ids(f"{LETTERS[i]}:"), present))
            prompt.append(self._number(p.operands[:, i], p.operand_len[:, i]))
        prompt.append(seg.const(n, self.text_ids("=")))
        order = p.answer_order
        assert order is not None, "sorting problems carry answer_order"
        letters = np.where(order >= 0, self.token_ids["a"] + order, self.pad_id)
        return prompt, [(letters, (order >= 0).sum(axis=1))]

    def _carry_trace(self, p: Problems) -> tuple[list[seg.Segment], list[seg.Segment]]:
        """``123*  45=`` -> ``+501302501500000000``: sign, then per result digit (LSB first) the
        digit and its two-digit carry (schoolbook column carry for *, addition carry for +,
        the borrow of ``|a - b|``'s column for -), after the traces the config asks for
        (arith.text._scratchpad; with mul_trace the carries of * are its last running sum's).
        """
        n = len(p)
        # operand field width and result digits; wider problems (length tests) widen both
        width = max(operand_width(self.task), p.operands.shape[2])
        r = max_answer_digits(self.task, width)
        operands = _digits.pad_left(p.operands, width)
        blank = np.arange(width) < (width - p.operand_len)[:, :, None]  # right-align with spaces
        fields = np.where(blank, self.token_ids[" "], operands.astype(np.int64))
        ops = [self.text_ids(s.ljust(2)) for s in op_symbols(self.task)]
        prompt = [
            (fields[:, 0], np.full(n, width)),
            seg.choose(p.op, ops),
            (fields[:, 1], np.full(n, width)),
            seg.const(n, self.text_ids("=")),
        ]
        digits = _digits.pad_left(p.answer, r)[:, -r:][:, ::-1].astype(np.int64)
        carries = self._carries(p, operands, r)
        triples = np.stack([digits, carries // 10, carries % 10], axis=2).reshape(n, 3 * r)
        sign = np.where(p.answer_negative, self.token_ids["-"], self.token_ids["+"])[:, None]
        comma, colon = self.text_ids(",:")
        trace = _scratchpad.segments(
            self.trace_keys, op_symbols(self.task), p.op, operands, comma, colon
        )
        return prompt, [*trace, (sign, np.ones(n, np.int64)), (triples, np.full(n, 3 * r))]

    def _carries(self, p: Problems, operands: np.ndarray, r: int) -> np.ndarray:
        """(N, R) column carries, LSB first (arith.problems.traces.column_carries). Modular "+"
        gets zeros: its result is reduced mod p, so addition carries would not explain it."""
        if self.task.name == "modular":
            return np.zeros((len(p), r), dtype=np.int64)
        a, b = operands[:, 0], operands[:, 1]
        symbols, mul_trace = op_symbols(self.task), self.config.mul_trace
        carries = traces.column_carries(symbols, p.op, a, b, r, mul_trace)
        if carries.max(initial=0) > MAX_TRACE_CARRY:
            raise ValueError(f"carry_trace cannot write carry {carries.max()} in two digits")
        return carries

    def max_seq_len(self, n_digits: int | None = None) -> int:
        """Upper bound on prompt + answer + EOS for this task (``n_digits`` overrides k).

        Exact for addition and multiplication; for multi_op it adds the longest operator and the
        sign to the widest answer, which no single problem reaches at once.
        """
        k = operand_width(self.task, n_digits)
        r = max_answer_digits(self.task, k)
        symbols = op_symbols(self.task)
        name = self.config.name
        if name == "carry_trace":
            return 2 * k + 2 + 1 + 1 + 3 * r + 1 + _scratchpad.max_len(self.trace_keys, symbols, k)
        num = {
            "spaced": lambda d: d + (d - 1) // 3,
            "base100": lambda d: (d + 1) // 2,
        }.get(name, lambda d: d)
        if self.task.name == "sorting":
            m = self.task.max_items
            return m * (2 + num(k)) + (m - 1) + 1 + m + 1
        op = 1 if name == "base100" else max(len(s) for s in symbols) + 2 * (name != "reversed")
        sign = int(self.task.name == "multi_op" and "-" in symbols)
        equals = 2 if name == "plain" else 1
        return 2 * num(k) + op + equals + sign + num(r) + 1

    def example_prompt(self) -> str:
        """One prompt in this format, as a user types it, with operands of the trained width
        (``"123 + 456 ="`` for plain 3-digit addition: a model trained on fixed-width operands
        has no answer for shorter ones)."""
        from arith.problems.tasks import from_ints

        k = max(1, self.task.n_digits)
        row = [int(("1234567890" * 20)[:k]), int(("4567890123" * 20)[:k])]
        if self.task.name == "sorting":
            row = [3, 1, 2][: self.task.max_items]
        if self.task.name == "modular":
            row = [v % self.task.modulus or 1 for v in (12, 34)]
        encoded = self.encode(from_ints(self.task, [row], [op_symbols(self.task)[0]]))
        return self.decode(encoded.tokens[0, : encoded.prompt_len[0]].tolist())

    # -- decoding ------------------------------------------------------------------------------

    def decode(self, ids: typing.Iterable[int]) -> str:
        """Token ids -> text, stopping at EOS and dropping PAD.

        base100 renders like plain: ``[1, 23, "+", 4, 56, "=", 5, 79]`` -> ``"123 + 456 =579"``.
        """
        kept: list[int] = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i != self.pad_id:
                kept.append(i)
        if self.config.name != "base100":
            return "".join(self.vocab[i] for i in kept)
        return _base100_text(kept, self.vocab)

    def answer_text(self, problems: Problems) -> list[str]:
        """Expected answer text per problem (no EOS): ``"6912"`` for plain 1234 + 5678."""
        enc = self.encode(problems)
        return [
            self.decode(row[start:]) for row, start in zip(enc.tokens, enc.prompt_len, strict=True)
        ]

    def normalise(self, text: str) -> str:
        """Text for a normalised match: all whitespace removed (``"6 912"`` -> ``"6912"``)."""
        return "".join(text.split())


def _base100_text(ids: list[int], vocab: tuple[str, ...]) -> str:
    """base100 token ids (no PAD, no EOS) as plain writes them: ``[1, 23, "+", ...]`` ->
    ``"123 + ..."``."""
    out, in_number, seen_equals = [], False, False
    for i in ids:
        if i < 100:  # a number token: only the first of a number drops its leading zero
            out.append(f"{i:02d}" if in_number else str(i))
            in_number = True
            continue
        # An operator sits between two numbers of the prompt; a "-" anywhere else (first, or
        # after "=") is the answer's sign and stays tight, as in plain's "0 - 999 =-999".
        token, infix, in_number = vocab[i], in_number and not seen_equals, False
        if token == "=":
            seen_equals = True
            out.append(" =")
        else:
            out.append(f" {token} " if infix else token)
    return "".join(out)

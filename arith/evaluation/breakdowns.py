"""What an evaluation set's exact match is broken down by, and the metric names that follow:
per operation, per longest operand length, per carry or borrow chain and cascade, and per
answer digit position (``evaluate.evaluate_set`` measures them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from arith.problems import carries, tasks
from arith.problems.tasks import Problems
from arith.text.formats import Encoded, Format

# MLflow metric names allow letters, digits, "_", "-", ".", " " and "/": operators get names.
OP_NAMES = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "mod", "/": "div"}
# the lowest exact match of a set's operations: seed 004's bar is every operation at 99 %, and a
# search or a table can aim at it in one number
WORST_OP_KEY = "exact_match/worst_op"


def set_metric_names(
    task: tasks.TaskConfig,
    format_name: str,
    *,
    reference_differs: bool,
    lengths: Iterable[int],
    max_chain: int,
    decoded: bool = True,
) -> set[str]:
    """Every key ``evaluate_set`` can return for a set of ``task`` problems in ``format_name``,
    with longest operands of ``lengths`` digits and carry chains up to ``max_chain``.

    ``reference_differs``: the answers are expected in another format (the ``ood`` set). A
    superset: a breakdown appears only where the set holds such problems. The same rules as
    ``evaluate_set`` and ``_breakdowns``, so the two cannot disagree. ``decoded=False``: a set
    measured without decoding (``evaluate_set(decode=False)``), without the text's metrics.
    """
    lengths = list(lengths)
    names = {"exact_match"}
    if decoded:
        names.add("short_answers")
    if decoded and reports_normalised(format_name, reference_differs):
        names.add("normalised_match")
    if not reference_differs:
        names |= {"loss", "token_accuracy"}
    if _by_op(task):
        names |= {_op_key(symbol) for symbol in tasks.op_symbols(task)}
        if len(tasks.op_symbols(task)) > 1:
            names.add(WORST_OP_KEY)
    chains = range(max_chain + 1)
    for symbol in _chain_symbols(task):
        names |= {_chain_key(task, symbol, c) for c in chains} | {_cascade_key(task, symbol)}
    if _by_length(task):
        names |= {_length_key(n) for n in lengths}
    if decoded and by_digit(task):
        widest = tasks.max_answer_digits(task, max(lengths))
        names |= {_digit_key(i) for i in range(widest)}
    return names


EVALUATED_TRAIN = ("train/loss", "train/exact_match", "train/token_accuracy")
"""What every evaluation during training reports of training, beside the validation set."""


def evaluated_metrics(task: tasks.TaskConfig, format_name: str, max_chain: int) -> set[str]:
    """Names every evaluation during training reports, which ``train.monitor`` (early stopping,
    the target, the best weights) can follow: the training loss and sample, and the validation
    set's metrics as ``arith.training.member_run.step_metrics`` measures them (not decoded)."""
    val = set_metric_names(
        task,
        format_name,
        reference_differs=False,
        lengths=range(1, task.n_digits + 1),
        max_chain=max_chain,
        decoded=False,
    )
    return {*EVALUATED_TRAIN, *(f"val/{key}" for key in val)}


def reports_normalised(format_name: str, reference_differs: bool) -> bool:
    """Normalised match says something only where spacing can differ from the expected text."""
    return reference_differs or format_name == "spaced"


def _by_op(task: tasks.TaskConfig) -> bool:
    return len(tasks.op_symbols(task)) > 1 or task.name in ("multi_op", "modular")


def _by_length(task: tasks.TaskConfig) -> bool:
    return task.name in ("addition", "multiplication", "sorting")


def by_digit(task: tasks.TaskConfig) -> bool:
    return task.name != "sorting"  # a sorting answer is letters, not digits


def _op_key(symbol: str) -> str:
    return f"exact_match/{OP_NAMES.get(symbol, symbol)}"


def _length_key(length: int) -> str:
    return f"exact_match/len_{length}"


CHAIN_KINDS = {"+": "carry", "-": "borrow"}
"""The chain each operator's exact match is broken down by (arith.problems.carries)."""


def _chain_symbols(task: tasks.TaskConfig) -> list[str]:
    """The operators of ``task`` broken down by carry or borrow chain; none for other tasks."""
    if task.name not in ("addition", "multi_op"):
        return []
    return [symbol for symbol in tasks.op_symbols(task) if symbol in CHAIN_KINDS]


def _chain_key(task: tasks.TaskConfig, symbol: str, chain: int) -> str:
    """Addition: ``exact_match/carry_<c>``; multi_op: ``exact_match/add/carry_<c>`` and
    ``exact_match/sub/borrow_<c>``."""
    return f"exact_match/{_chain_op(task, symbol)}{CHAIN_KINDS[symbol]}_{chain}"


def _cascade_key(task: tasks.TaskConfig, symbol: str) -> str:
    """Addition: ``exact_match/cascade``; multi_op: ``exact_match/add/cascade`` and
    ``exact_match/sub/cascade`` (arith.problems.carries.cascades)."""
    return f"exact_match/{_chain_op(task, symbol)}cascade"


def _chain_op(task: tasks.TaskConfig, symbol: str) -> str:
    """The operator's part of a chain key: none for addition, ``add/`` in multi_op."""
    return "" if task.name == "addition" else f"{OP_NAMES[symbol]}/"


def _digit_key(position: int) -> str:
    return f"digit_accuracy/{position}"


def exact_match_breakdowns(problems: Problems, exact: np.ndarray, fmt: Format) -> dict[str, float]:
    """Exact match per operation (when there are several) and per longest operand length."""
    out: dict[str, float] = {}
    symbols = tasks.op_symbols(fmt.task)
    if _by_op(fmt.task):
        per_op = {}
        for index, symbol in enumerate(symbols):
            rows = problems.op == index
            if rows.any():
                per_op[_op_key(symbol)] = float(exact[rows].mean())
        out.update(per_op)
        if len(symbols) > 1 and per_op:
            out[WORST_OP_KEY] = min(per_op.values())
    out.update(_carry_breakdown(problems, exact, fmt.task))
    if _by_length(fmt.task):
        groups: dict[int, list[bool]] = defaultdict(list)
        longest = problems.operand_len.max(axis=1)
        for length in np.unique(longest):
            groups[int(length)] = exact[longest == length].tolist()
        if len(groups) > 1:
            for length, hits in sorted(groups.items()):
                out[_length_key(length)] = float(np.mean(hits))
    return out


def _carry_breakdown(problems: Problems, exact: np.ndarray, task: tasks.TaskConfig) -> dict:
    """Exact match by the longest carry chain (``+``) or borrow chain (``-``) of a problem
    (keys: ``_chain_key``), and on its cascades (``_cascade_key``, where the set holds any).
    Other tasks have no carries to count."""
    chained = _chain_symbols(task)
    if not chained:
        return {}
    symbols = tasks.op_symbols(task)
    chain = carries.longest_chain(problems, symbols)
    cascade = carries.cascades(problems, symbols)
    out: dict[str, float] = {}
    for index, symbol in enumerate(symbols):
        if symbol not in chained:
            continue
        rows = problems.op == index
        for c in np.unique(chain[rows]):
            hits = exact[rows & (chain == c)]
            out[_chain_key(task, symbol, int(c))] = float(hits.mean())
        if (rows & cascade).any():
            out[_cascade_key(task, symbol)] = float(exact[rows & cascade].mean())
    return out


def digit_accuracy(
    got: list[str], problems: Problems, fmt: Format, fed: np.ndarray | None = None
) -> dict[str, float]:
    """Accuracy of each answer digit, ``digit_accuracy/<i>``, over the problems whose answer
    has a digit i; positions count from the least significant digit (0: the ones), so they
    align across answer lengths, as length-generalisation papers report them.

    ``got`` is the decoded answer text; its digits are read in ``fmt``'s order (reversed
    answers least significant first, carry traces every third character after the sign,
    other formats from the right, spacing and sign aside), so a missing or extra digit in a
    most-significant-first answer shows as wrong digits above it. The expected digits are
    the problem's own (|answer|, so a sign error shows in exact match only). ``fed``: per row,
    the characters at the start of its text that were fed in, not generated
    (``format.mask_first_n``): their digits are not scored (a position no row generated is
    left out).
    """
    width = int(problems.answer_len.max())
    expected = problems.answer[:, ::-1][:, :width]  # (N, width), the ones digit first
    predicted = np.full(expected.shape, -1, dtype=np.int16)
    for row, text in enumerate(got):
        if fed is not None and fed[row]:  # fed digits become a mark that is not scored
            head = "".join(FED if c.isdigit() else c for c in text[: fed[row]])
            text = head + text[fed[row] :]
        digits = _digits_from_ones(text, fmt.config.name)[:width]
        codes = np.frombuffer(digits.encode(), np.uint8).astype(np.int16)
        predicted[row, : len(digits)] = codes - ord("0")  # any other character: not 0..9
    present = np.arange(width)[None, :] < problems.answer_len[:, None]
    present &= predicted != ord(FED) - ord("0")
    hits = (predicted == expected) & present
    return {
        _digit_key(i): float(hits[:, i].sum() / present[:, i].sum())
        for i in range(width)
        if present[:, i].any()
    }


FED = "f"
"""Stands for a fed digit in ``digit_accuracy``: no format writes it."""


def fed_chars(generated: np.ndarray, answers: Encoded, reference: Format, fmt: Format):
    """Per row, the characters of its decoded answer that ``generate_ids`` fed in (the first
    ``format.mask_first_n`` answer tokens of ``reference``), or None when nothing was fed."""
    if not reference.config.mask_first_n:
        return None
    forced = np.minimum(reference.config.mask_first_n, answers.answer_len - 1)
    return np.array([len(fmt.decode(row[:n])) for row, n in zip(generated, forced, strict=True)])


def _digits_from_ones(text: str, format_name: str) -> str:
    """The digits of an answer text, least significant first: ``"6 912"`` -> ``"2196"``;
    reversed ``"2196"`` -> ``"2196"``; carry_trace ``"+501302"`` -> ``"53"``."""
    text = "".join(text.split())
    if format_name == "carry_trace":  # the answer follows a division or sign trace's last comma
        return text.rsplit(",", 1)[-1].lstrip("+-")[0::3]
    text = text.lstrip("+-")
    return text if format_name == "reversed" else text[::-1]

"""``python -m arith.predict MODEL "1234 + 5678 =" ...``

Prints the model's greedy completion of each prompt (one per argument, or one per line on stdin).
MODEL is a run folder (``model.pt`` or ``checkpoint.pt``) or a checkpoint file; a sweep trial's
MLflow run (``runs:/<run_id>``) is asked through ``python -m sweeps.predict``, which fetches it
(arith never imports MLflow). Prompts are problems of the model's task written in its format,
e.g. ``"1234 + 5678 ="`` for plain addition.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

import torch

from arith import config as config_lib
from arith.cli import HelpFormatter, fail, run_main
from arith.evaluation.evaluate import greedy_decode
from arith.model.gpt import GPT
from arith.problems.tasks import from_ints, op_symbols
from arith.text.formats import LETTERS, Format, build_format
from arith.training import checkpoint as ckpt

_RUN_ID = re.compile(r"[0-9a-f]{32}")


def load_model(path: str | Path) -> tuple[GPT, object]:
    """The model and format saved in a run folder, model or checkpoint file."""
    path = Path(path)
    found = path.is_file() or (path / ckpt.MODEL_FILE).exists() or (path / ckpt.FILE).exists()
    if not found:
        fail(f"model: no model.pt or checkpoint.pt at {str(path)!r}")
    payload = ckpt.read_model(path)
    config = config_lib.from_dict(payload["config"])
    fmt = build_format(config.format, config.task)
    weights = payload["model"]
    max_seq_len = weights["wpe.weight"].shape[-2] if "wpe.weight" in weights else 0
    model = GPT(config.model, len(fmt.vocab), max(max_seq_len, fmt.max_seq_len()), fmt.digit_ids)
    model.load_state_dict(with_member_axis(weights, model.state_dict()))
    return model.eval(), fmt


def with_member_axis(weights: dict, expected: dict) -> dict:
    """Weights saved before packed trials (no leading member axis) as a pack of one, so models
    logged by earlier sweeps still load; current weights pass through. Those models also saved
    a tied output head as ``lm_head.weight`` (the same tensor as ``wte.weight``); the packed
    model reads ``wte`` directly, so that alias is dropped."""
    tied_alias = "lm_head.weight" not in expected
    return {
        key: value.unsqueeze(0)
        if key in expected and expected[key].shape == (1, *value.shape)
        else value
        for key, value in weights.items()
        if not (tied_alias and key == "lm_head.weight")
    }


def names_a_run(source: str) -> bool:
    """Whether MODEL names an MLflow run (``runs:/<id>`` or a bare 32-hex id that is no path)."""
    return source.startswith("runs:/") or bool(
        _RUN_ID.fullmatch(source) and not Path(source).exists()
    )


def unfamiliar(task, lengths: list[int]) -> str | None:
    """Why a well-formed prompt, whose operands have ``lengths`` digits, lies outside what the
    model trained on (operands longer than its digits, or shorter than the only length it saw),
    or None. Its answer is still given: probing outside training is the point of length
    generalisation; the note says so."""
    if task.name not in ("addition", "multiplication", "multi_op"):
        return None
    k = task.n_digits
    if max(lengths) > k:
        return f"operands longer than the {k} digits it trained on"
    if task.operand_lengths == "fixed" and k > 1 and min(lengths) < k:
        return f"it trained on {k}-digit operands only (task.operand_lengths: fixed)"
    return None


def parse_prompt(fmt: Format, text: str) -> tuple[list[int], str]:
    """(operands, operator) of a prompt of the format's task typed in its text form; ValueError
    with one line (and an example of the form) for anything else, e.g. ``"hello"``."""
    compact = "".join(text.split())
    symbols = sorted(op_symbols(fmt.task), key=len, reverse=True)
    if fmt.task.name == "sorting":
        match = re.fullmatch(r"((?:[a-z]:\d+,)*[a-z]:\d+)=", compact)
        items = match.group(1).split(",") if match else []
        if not match or [i[0] for i in items] != list(LETTERS[: len(items)]):
            raise ValueError(_not_a_problem(fmt))
        values = [i[2:] for i in items]
        op = symbols[0]
    else:
        ops = "|".join(re.escape(s) for s in symbols)
        match = re.fullmatch(rf"(\d+)({ops})(\d+)=", compact)
        if not match:
            raise ValueError(_not_a_problem(fmt))
        values, op = [match.group(1), match.group(3)], match.group(2)
    if fmt.config.name == "reversed":  # digits are written least significant first
        values = [v[::-1] for v in values]
    return [int(v) for v in values], op


def _not_a_problem(fmt: Format) -> str:
    return (
        f"not a problem of the model's task ({fmt.task.name}) in its format "
        f"({fmt.config.name}), e.g. {fmt.example_prompt()!r}"
    )


def encode_prompt_text(fmt: Format, text: str) -> list[int]:
    """Token ids of a prompt typed in the format's text form (``"1234 + 5678 ="`` for plain),
    read as typed, without parsing it as a problem. ValueError with a one-line message for
    anything outside the vocabulary."""
    if fmt.config.name != "base100":
        bad = sorted({c for c in text if c not in fmt.token_ids or len(c) != 1})
        if bad:
            raise ValueError(f"characters {bad} are not in the {fmt.config.name} vocabulary")
        return fmt.text_ids(text)
    compact = "".join(text.split())
    pieces = re.findall(r"\d+|//|[-+*/%=]|.", compact)
    bad = sorted({x for x in pieces if not x.isdigit() and x not in fmt.token_ids})
    if bad:
        raise ValueError(f"characters {bad} are not in the base100 vocabulary")
    ids: list[int] = []
    for x in pieces:
        if x.isdigit():
            digits = x.lstrip("0") or "0"
            head = len(digits) % 2 or 2  # big-endian pairs: 12345 -> 1, 23, 45
            ids.append(int(digits[:head]))
            ids += [int(digits[i : i + 2]) for i in range(head, len(digits), 2)]
        else:
            ids.append(fmt.token_ids[x])
    return ids


class Prompt(NamedTuple):
    """A prompt as the model reads it."""

    ids: list[int]
    """Its tokens, as training wrote them."""
    why: str | None
    """Why it lies outside training, or None."""
    n_digits: int
    """Its longest operand's digits: how long an answer may be (``complete``)."""


def problem_ids(fmt, prompt: str) -> Prompt:
    """The prompt's tokens, why it lies outside training, its width; ValueError with one line
    for anything that is not a problem of the model's task in its format."""
    operands, op = parse_prompt(fmt, prompt)
    problem = from_ints(fmt.task, [operands], [op])
    encoded = fmt.encode(problem)
    lengths = problem.operand_len[0].tolist()
    ids = encoded.tokens[0, : encoded.prompt_len[0]].tolist()
    return Prompt(ids, unfamiliar(fmt.task, lengths), max(lengths))


def prompt_ids(fmt, prompt: str) -> Prompt:
    """``problem_ids`` for the command line: one line and exit 2 for a prompt it refuses."""
    try:
        return problem_ids(fmt, prompt)
    except ValueError as err:
        fail(f"prompt {prompt!r}: {err}")


def complete(model: GPT, fmt: Format, prompt: Prompt, max_new_tokens: int | None = None) -> str:
    """The model's greedy answer to ``prompt``, decoded; ValueError when the prompt leaves no
    room in a learned position table. Unless ``max_new_tokens`` says otherwise, the answer may
    run as long as the prompt's operands need (a longer problem than training's has a longer
    answer: a length-generalising model is never cut at the trained length)."""
    ids = prompt.ids
    # a learned position table ends at the context length the model was trained with
    room = model.max_seq_len - len(ids)
    if model.cfg.position == "learned" and room < 1:
        raise ValueError(f"longer than the model's {model.max_seq_len}-token context")
    limit = max_new_tokens or fmt.max_seq_len(max(prompt.n_digits, fmt.task.n_digits))
    if model.cfg.position == "learned":
        limit = min(limit, room)
    with torch.no_grad():
        out = greedy_decode(model, torch.tensor([ids]), limit, fmt.eos_id)[0]
    return fmt.decode(out.tolist())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m arith.predict",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument("model", help="run folder or checkpoint file")
    parser.add_argument("prompts", nargs="*", help="prompts; read from stdin when none are given")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    args = parser.parse_intermixed_args(argv)  # options may follow the prompts
    if names_a_run(args.model):
        fail(f"model: {args.model} is an MLflow run; python -m sweeps.predict {args.model} asks it")
    model, fmt = load_model(args.model)
    prompts = args.prompts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    # every prompt checked before any answer (or note) is printed
    checked = [(text, prompt_ids(fmt, text)) for text in prompts]
    for text, prompt in checked:
        if prompt.why:
            print(f"note: prompt {text!r}: {prompt.why}; its answer may be wrong", file=sys.stderr)
    for text, prompt in checked:
        try:
            print(complete(model, fmt, prompt, args.max_new_tokens))
        except ValueError as err:
            fail(f"prompt {text!r}: {err}")
    return 0


if __name__ == "__main__":
    run_main(main)

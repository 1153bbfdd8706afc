"""``python -m arith.predict CHECKPOINT "1234 + 5678 =" ...``

Prints the model's greedy completion of each prompt (one per argument, or one per line on stdin).
Prompts are written in the checkpoint's format, e.g. ``"1234 + 5678 ="`` for plain.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from arith import checkpoint as ckpt
from arith import config as config_lib
from arith.cli import HelpFormatter, fail, run_main
from arith.evaluate import greedy_decode
from arith.formats import build_format
from arith.model import GPT


def load_model(path: str | Path) -> tuple[GPT, object]:
    """The model and format saved in a checkpoint file or folder."""
    path = Path(path)
    if not (path / ckpt.FILE).exists() and not path.is_file():
        fail(f"checkpoint: no checkpoint at {str(path)!r}")
    payload = ckpt.read(path)
    config = config_lib.from_dict(payload["config"])
    fmt = build_format(config.format, config.task)
    max_seq_len = payload["model"]["wpe.weight"].shape[0] if "wpe.weight" in payload["model"] else 0
    model = GPT(config.model, len(fmt.vocab), max(max_seq_len, fmt.max_seq_len()), fmt.digit_ids)
    model.load_state_dict(payload["model"])
    return model.eval(), fmt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m arith.predict",
        description=__doc__.split("\n")[2],
    )
    parser.add_argument("checkpoint", help="checkpoint.pt or the folder holding it")
    parser.add_argument("prompts", nargs="*", help="prompts; read from stdin when none are given")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    args = parser.parse_args(argv)
    model, fmt = load_model(args.checkpoint)
    prompts = args.prompts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    for prompt in prompts:
        try:
            ids = fmt.encode_prompt_text(prompt)
        except ValueError as err:
            fail(f"prompt {prompt!r}: {err}")
        # a learned position table ends at the context length the model was trained with
        room = model.max_seq_len - len(ids)
        if model.cfg.position == "learned" and room < 1:
            fail(f"prompt {prompt!r}: longer than the model's {model.max_seq_len}-token context")
        limit = args.max_new_tokens or fmt.max_seq_len()
        if model.cfg.position == "learned":
            limit = min(limit, room)
        with torch.no_grad():
            out = greedy_decode(model, torch.tensor([ids]), limit, fmt.eos_id)[0]
        print(fmt.decode(out.tolist()))
    return 0


if __name__ == "__main__":
    run_main(main)

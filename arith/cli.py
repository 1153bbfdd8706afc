"""Shared pieces of the command-line entry points: one clear line and exit 2 for bad input."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import NoReturn

from arith.errors import ConfigError


def fail(message: str) -> NoReturn:
    """Print one line to stderr and exit with status 2 (a user's mistake, not a crash)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def one_line(err: BaseException, limit: int = 300) -> str:
    """An error as one line for the user: its message (an MLflow error's ``message``) with
    whitespace folded, cut to ``limit`` characters."""
    text = " ".join(str(getattr(err, "message", None) or err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_main(main: Callable[[], int | None]) -> None:
    """Run ``main`` so a ConfigError becomes one line and exit 2, never a traceback."""
    try:
        code = main()
    except ConfigError as err:
        fail(str(err))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(code or 0)


def plain_text(text: str) -> str:
    """Docstring markup off for a terminal: ``code`` and :role:`name` become code and name."""
    text = re.sub(r":[a-z]+:`([^`]*)`", r"\1", text)
    return text.replace("``", "")


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` without reStructuredText backticks (descriptions come from docstrings)."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain_text(super()._expand_help(action))

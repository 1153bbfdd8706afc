"""The sweeps commands' argument parser: a mistake on the command line is one line and exit 2,
like a mistake in a spec (argparse's own error prints the usage block first)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from arith.cli import HelpFormatter


class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        from sweeps.spec.spec_file import printable

        print(f"error: {printable(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)

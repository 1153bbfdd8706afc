"""The one error type a user's mistake raises, so every command can print one line and exit 2."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad value in a run config: names the dotted path, the value and what is allowed.

    ``str(err)`` is the whole message a command prints, e.g.
    ``model.n_layer: expected a positive integer, but got -1``.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def require(condition: bool, path: str, message: str) -> None:
    """Raise ``ConfigError(path, message)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(path, message)

"""The sweep's own Tune callbacks, bound to the driver process that runs them.

Tune pickles its callbacks with the experiment and, on ``Tuner.restore``, runs the unpickled
copies: a resumed driver's callbacks would be the killed driver's, apart from the tracker this
driver attaches to MLflow and drains at the end (``sweeps.run``). ``ProcessCallbacks`` is one
callback that holds the sweep's others; in Tune's public ``setup`` hook (called once, before
the first trial) it takes this process's instances, registered under the experiment's name by
``bind``, and hands every later hook to them. Where none is registered (a fresh sweep's copy
that Ray Client runs on the cluster's head), it keeps its own.
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

_LIVE: dict[str, list[Callback]] = {}  # experiment name -> this process's callbacks
# Tune's per-event hooks, handed on as they are (setup and the state hooks are below).
_HOOKS = [name for name in vars(Callback) if name.startswith("on_")]


def bind(name: str, callbacks: list[Callback]) -> ProcessCallbacks:
    """Register ``callbacks`` as this process's for experiment ``name``; the one callback to
    give Tune (fresh or restored)."""
    _LIVE[name] = list(callbacks)
    return ProcessCallbacks(name, callbacks)


class ProcessCallbacks(Callback):
    """Hands Tune's hooks to the sweep's callbacks of this process (see the module docstring)."""

    def __init__(self, name: str, callbacks: list[Callback]) -> None:
        self.name = name
        self.callbacks = list(callbacks)
        self.restored_state: dict[int, Any] | None = None

    def setup(self, **info) -> None:
        self.callbacks = _LIVE.get(self.name, self.callbacks)
        if self.restored_state:
            self._set_states(self.restored_state)
        for callback in self.callbacks:
            callback.setup(**info)

    def get_state(self) -> dict[int, Any] | None:
        states = {i: c.get_state() for i, c in enumerate(self.callbacks)}
        return states if any(states.values()) else None

    def set_state(self, state: dict[int, Any]) -> None:
        # Tune restores state before setup: keep it for the callbacks setup binds.
        self.restored_state = state

    def _set_states(self, states: dict[int, Any]) -> None:
        for i, callback in enumerate(self.callbacks):
            if states.get(i):
                callback.set_state(states[i])


def _hand_on(hook: str):
    def hand_on(self: ProcessCallbacks, *args, **kwargs) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(*args, **kwargs)

    hand_on.__name__ = hook
    return hand_on


for _hook in _HOOKS:
    setattr(ProcessCallbacks, _hook, _hand_on(_hook))

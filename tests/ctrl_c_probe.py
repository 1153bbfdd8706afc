"""``python tests/ctrl_c_probe.py MOMENT -m sweeps.run ARGS...``: the sweep, pressing Ctrl-C
itself (SIGINT to its own process) at a named moment:

- ``ended``: three presses after the sweep has ended: once its parent run is marked FINISHED,
  once its summary is printed, and as the interpreter exits (the last at-exit handler). Each
  must leave the sweep finished: exit 0, no traceback.
- ``stopping``: a press once a Ctrl-C from outside has stopped the sweep and its unfinished
  runs are ended, while its partial tables are written: it stops at once.
- ``importing_ray``: a press in the middle of the command's first ``import ray`` (as
  ``ray._private.worker`` is imported), which leaves Ray half imported.

Each press is sent from the main thread, so Python's handler runs at that moment, instead
of wherever a press from outside happens to land (``tests/test_user_chaos.py``)."""

from __future__ import annotations

import atexit
import functools
import os
import runpy
import signal
import sys


def press() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def pressed_after(call):
    @functools.wraps(call)
    def then_press(*args, **kwargs):
        out = call(*args, **kwargs)
        press()
        return out

    return then_press


class PressWhenImported:
    """A finder that presses as ``name`` is about to be imported (finding nothing itself)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname == self.name:
            sys.meta_path.remove(self)
            press()
        return None


def main() -> None:
    moment, dash_m, module, *rest = sys.argv[1:]
    assert dash_m == "-m" and moment in ("ended", "stopping", "importing_ray"), sys.argv
    if moment == "importing_ray":  # before anything of the sweep's imports Ray
        sys.meta_path.insert(0, PressWhenImported("ray._private.worker"))
    else:
        from sweeps.runtime import outputs
        from sweeps.tracking.records import SweepRecords

        if moment == "ended":
            atexit.register(press)  # registered first, so run last
            SweepRecords.finish_parent = pressed_after(SweepRecords.finish_parent)
            outputs.print_summary = pressed_after(outputs.print_summary)
        else:
            SweepRecords.end_unfinished = pressed_after(SweepRecords.end_unfinished)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

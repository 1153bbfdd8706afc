"""A one-line live view of a sweep, instead of Ray's pages of trial tables::

    smoke  3/4 done · 1 running · 0 pending · 0 errored · best val/exact_match 0.912 · 0:42

Its best is the figure the sweep chooses its best trial on (``sweeps.runtime.report``): each
trial's latest value of the metric, the best of those; never a trial's peak at one evaluation,
which a later evaluation may have left behind. A resumed sweep's line says what it took over::

    smoke  1/4 done · 1 running · 2 pending · 0 errored · resumed: 1 done, 1 from a checkpoint · ...

On a terminal the line is rewritten in place; elsewhere (logs, CI) a line is printed only when
the counts change, at most every ``interval_s`` seconds.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

from ray.tune import Callback

from sweeps.runtime import interrupt


def format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def status_counts(trials: list, pack_sizes: list[int] | int | None = None) -> dict[str, int]:
    """Trials per state; a packed sweep's Tune trial counts as the trials it packs
    (``pack_sizes[k]`` for pack k; one number: every Tune trial's, as Optuna's over seeds)."""
    counts = {"done": 0, "running": 0, "pending": 0, "errored": 0}
    for trial in trials:
        if pack_sizes is None or isinstance(pack_sizes, int):
            n = pack_sizes or 1
        else:
            n = pack_sizes[trial.config["pack"]]
        status = trial.status
        if status == "TERMINATED":
            counts["done"] += n
        elif status == "RUNNING":
            counts["running"] += n
        elif status == "ERROR":
            counts["errored"] += n
        else:  # PENDING, PAUSED
            counts["pending"] += n
    return counts


class ProgressLine(Callback):
    """Tune callback printing done / running / pending / errored, best so far and elapsed.

    ``pack_sizes[k]`` is the number of trials pack ``k`` trains (a packed sweep's Tune trial
    has config ``{"pack": k}``), so the line counts trials, never packs. ``resumed``: the sweep
    continues an earlier run (``--resume``), whose finished trials and checkpoints the line
    names.
    """

    def __init__(
        self,
        name: str,
        total: int | None,
        metric: str,
        mode: str,
        stream: TextIO | None = None,
        interval_s: float = 0.5,
        pack_sizes: list[int] | int | None = None,
        resumed: bool = False,
        over_seeds: bool = False,
    ) -> None:
        self.name, self.total, self.metric, self.mode = name, total, metric, mode
        # Optuna's trials over seeds: the best is a config's figure (its worst seed's), which
        # a report carries beside its seeds' own (sweeps.spec.seed_trials), not a seed's
        self.over_seeds = over_seeds
        self.pack_sizes = pack_sizes
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        # Each trial's (a pack's member's) latest value of the metric, by trial and member.
        self.latest: dict[tuple[str, str], float] = {}
        self.resumed = resumed
        self.taken_over: dict[str, int] | None = None  # a resume's, read at its first step
        self.from_checkpoints: set[str] = set()
        self.start = time.monotonic()
        self._last_line = ""
        self._last_print = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stream": None}  # streams do not pickle

    @property
    def best(self) -> float | None:
        """The best of the trials' latest values: what the sweep would choose on now."""
        if not self.latest:
            return None
        return max(self.latest.values()) if self.mode == "max" else min(self.latest.values())

    def line(self, trials: list) -> str:
        counts = status_counts(trials, self.pack_sizes)
        created = sum(counts.values())
        total = max(self.total or 0, created)
        counts["pending"] += total - created  # trials the searcher has not created yet
        best = "-" if self.best is None else f"{self.best:.4g}"
        return (
            f"{self.name}  {counts['done']}/{total} done · {counts['running']} running · "
            f"{counts['pending']} pending · {counts['errored']} errored{self._resumed_part()} · "
            f"best {self.metric} {best} · {format_elapsed(time.monotonic() - self.start)}"
        )

    def _resumed_part(self) -> str:
        """`` · resumed: 2 done, 1 from a checkpoint``: what a resume took over, once known."""
        done = (self.taken_over or {}).get("done", 0)
        restarted = len(self.from_checkpoints)
        parts = [f"{done} done"] if done else []
        if restarted:
            parts.append(f"{restarted} from a checkpoint" if restarted == 1 else
                         f"{restarted} from checkpoints")  # fmt: skip
        return f" · resumed: {', '.join(parts)}" if parts else ""

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        # A trial of a resumed sweep that restarts where its checkpoint left it.
        if self.resumed and getattr(trial, "latest_checkpoint_result", None) is not None:
            self.from_checkpoints |= set(self._keys(trial))

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        self._consider(trial, result)

    def _consider(self, trial, result: dict | None) -> None:
        # A packed sweep reports its members' metrics under "members" (sweeps.spec.packing).
        members = (result or {}).get("members")
        # getattr: a line pickled by an earlier version, restored by --resume, has no flag
        if getattr(self, "over_seeds", False):
            members = None
        reported = members if members else {"": result or {}}
        for member, metrics in reported.items():
            value = metrics.get(self.metric)
            if isinstance(value, int | float) and math.isfinite(value):
                self.latest[(trial.trial_id, member)] = float(value)

    def _keys(self, trial) -> list[str]:
        """The trials a Tune trial stands for: itself, or each member of its pack."""
        if self.pack_sizes is None:
            return [trial.trial_id]
        return [f"{trial.trial_id}/{i}" for i in range(self.pack_sizes[trial.config["pack"]])]

    def _take_over(self, trials: list) -> None:
        """At a resume's first step: the trials it restored finished, and the latest figures
        of every trial it restored (Tune keeps each trial's last result)."""
        self.taken_over = {"done": status_counts(trials, self.pack_sizes)["done"]}
        for trial in trials:
            self._consider(trial, getattr(trial, "last_result", None))

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        if self.resumed and self.taken_over is None:
            self._take_over(trials)
        now = time.monotonic()
        if now - self._last_print < self.interval_s:
            return
        line = self.line(trials)
        if self._tty:
            self._write("\r\033[K" + line)
        elif _counts_part(line) != _counts_part(self._last_line):
            self._write(line + "\n")
        self._last_line, self._last_print = line, now

    def on_experiment_end(self, trials: list, **info) -> None:
        if interrupt.stopping():  # Tune has marked the trials it stopped TERMINATED
            self._write("\n" if self._tty else "")
            return
        line = self.line(trials)
        self._write(("\r\033[K" if self._tty else "") + line + "\n")

    def _write(self, text: str) -> None:
        if self.stream is None:
            self.stream = sys.stderr
        self.stream.write(text)
        self.stream.flush()


def _counts_part(line: str) -> str:
    return line.split(" · best")[0]

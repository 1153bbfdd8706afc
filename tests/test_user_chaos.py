"""A chaos test of user actions: from a seed, a random sequence of what users do at a terminal to
the smoke sweep (run it; press Ctrl-C at a random moment, once or twice; ``kill -9`` it;
``--resume``, here or through Ray Client to a head started the default way; retype the first
command; ``--overwrite``; ``--extend`` with one more grid value; ``python -m sweeps.table``), each
the real command, with invariants checked after every step:

- each command exits as documented (0; 130 after Ctrl-C; 2 for a refused command; 1 only where a
  sweep ended with errors), with no traceback;
- one parent run per sweep started (the first run and each ``--overwrite``), no trial with two
  child runs, no (metric, step) pair logged twice;
- nothing beside ``results/<name>/`` and the store changes (a canary folder and file);
- at the end, the table and every trial's figures equal an uninterrupted run's.

A Ctrl-C's moment is drawn from the whole run (``_moment``): seconds into its start-up (imports,
the checks, Ray starting), seconds after Ray started (Tune's set-up, the first trials), after
some of its results, or seconds after its tables (the end: plots, the uploads to MLflow).

The seeds come from the commit checked out (``commit_seed``: a fixed one outside git), so each CI
run tries sequences no run tried before; CHAOS_RUNS sequences, 1 in CI (on the newest Ray), as
a sequence takes 35-120 s on 2 cores (20 would add 15 to 40 minutes to a CI run). The seeds
are printed as the module starts, and a failing sequence prints its seed and its steps, each
with its seconds. Replay seeds with
``CHAOS_SEEDS=<seed>,<seed> python -m pytest tests/test_user_chaos.py``; run N sequences from
the commit's seeds with ``CHAOS_RUNS=N python -m pytest tests/test_user_chaos.py``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import ray
from sweep_procs import (
    ROOT,
    SMOKE,
    STATUS_LINES,
    assert_no_duplicate_steps,
    children,
    ctrl_c,
    kill,
    reference_trials,
    start_sweep,
    wait_until,
)

from sweeps.analysis.collect import render_tables
from sweeps.analysis.store import STATE_FILE
from sweeps.cluster import tunefix
from sweeps.spec.sweep_spec import load_spec

pytestmark = pytest.mark.slow


def commit_seed() -> int:
    """The checked-out commit's first 7 hex digits as a number; 0 outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30, check=True).stdout  # fmt: skip
        return int(head.strip()[:7], 16)
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


# 1 per Ray in CI (about 50 s each on 2 cores: the whole CI run must stay under 45 minutes).
RUNS = int(os.environ.get("CHAOS_RUNS", "1"))
# The newest Ray runs the commit's seeds, the oldest the block 1000 after: 2 x RUNS in all.
NEWEST = not ray.__version__.startswith(f"{tunefix.RAY_TESTED[0]}.")
FIRST_SEED = commit_seed() + (0 if NEWEST else 1000)
SEEDS = (
    [int(s) for s in os.environ["CHAOS_SEEDS"].split(",")]
    if os.environ.get("CHAOS_SEEDS")
    else list(range(FIRST_SEED, FIRST_SEED + RUNS))
)

BASE_SETS = ["base.train.max_steps=40"]
EXTENDED = "space.model.d_model=[16,32,24]"  # --extend: one more width
EXACT = ("val/exact_match", "test/exact_match", "train/exact_match", "train/loss", "n_params")
# Exit codes users see (docs/running.md): 0 done, 1 ended with errors, 2 refused, 130 Ctrl-C.
DOCUMENTED = {0, 1, 2, 130}


@dataclass
class Sequence:
    """What a sequence did so far, and what it expects."""

    seed: int
    tmp: Path
    sets: list[str] = field(default_factory=lambda: list(BASE_SETS))
    parents: int = 0  # sweeps started: the first run and each --overwrite that went ahead
    state: str = "none"  # none, stopped, finished
    # Stopped by a Ctrl-C before its trials ran, perhaps before it made its parent run: the
    # next action is --resume, which must finish it (the parent run counted may be missing);
    # stopped before it made anything at all (state none), the next is the same command.
    early: bool = False
    log: list[str] = field(default_factory=list)

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.tmp / 'mlflow.db'}"

    @property
    def out(self) -> Path:
        return self.tmp / "out" / "smoke"


# Where a Ctrl-C lands (``_moment``): up to START_S seconds into the command (imports, the
# checks, the parent run, Ray starting: about as long as the start-up takes on 2 cores), up to
# RAY_S after it said Ray was starting (Tune's set-up, the first trials), after 1..RESULTS
# results (the smoke sweep has 4 trials x 4 evaluations and a summary), or up to END_S after
# its tables were written (the end: plots, uploads to MLflow, the parent run ended).
START_S, RAY_S, RESULTS, END_S = 6.0, 4.0, 20, 2.0
EARLY = ("start", "ray")  # the phases before the sweep's trials run


def _moment(rng: random.Random, action: str) -> tuple[str, float]:
    """(phase, seconds or results into it) of a Ctrl-C of ``action``. An --overwrite or an
    --extend is stopped from its trials on: stopped earlier, what it leaves depends on how far
    it got (the earlier sweep removed or not), which the sequence cannot tell."""
    phases = ["start", "ray", "results", "results", "end"]
    phase = rng.choice(phases if action in ("run", "resume", "client") else phases[2:])
    if phase == "results":
        return phase, rng.randint(1, RESULTS)
    return phase, rng.uniform(0, {"start": START_S, "ray": RAY_S, "end": END_S}[phase])


def _stop(proc, how: str, moment: tuple[str, float], seq: Sequence, step: int, started: float):
    """Stop ``proc`` (``how``: ctrl_c, ctrl_c_twice, kill, none) at ``moment`` (or not, when
    it exits first). Results count in the result files it wrote to, and its tables are its
    ``trials.csv``, modified since ``started`` (not an --overwrite's old ones)."""
    if how == "none":
        return
    phase, value = moment

    def since_started(f: Path) -> bool:
        try:  # an --overwrite may be deleting it
            return f.stat().st_mtime >= started
        except OSError:
            return False

    def lines(f: Path) -> int:
        try:
            return len(f.read_text().splitlines()) if since_started(f) else 0
        except OSError:
            return 0

    def reached() -> bool:
        if phase == "ray":
            err = seq.tmp / f"{step}.err"
            return any(line.startswith(STATUS_LINES) for line in err.read_text().splitlines())
        if phase == "end":
            return since_started(seq.out / "trials.csv")
        experiment = seq.out / "ray"
        return sum(lines(f) for f in experiment.glob("*/*/result.json")) >= value

    if phase != "start":
        wait_until(reached, 120, proc, every_s=0.05)
    if phase != "results":
        wait_until(lambda: False, value, proc, every_s=0.05)  # the seconds into the phase
    if proc.poll() is not None:
        return
    if how == "kill":
        kill(proc)
        return
    ctrl_c(proc)
    if how == "ctrl_c_twice":
        time.sleep(0.3)
        if proc.poll() is None:
            ctrl_c(proc)


def _sweep(seq: Sequence, step: int, flags: tuple[str, ...], how: str, moment, env=None) -> int:
    started = time.time()
    proc = start_sweep(
        seq.tmp, seq.uri, seq.sets, log=f"{step}", flags=flags, new_session=True, env=env
    )
    try:
        _stop(proc, how, moment, seq, step, started)
        return proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            kill(proc)


def _table(seq: Sequence, step: int) -> int:
    args = [sys.executable, "-m", "sweeps.table", str(seq.out), "--tracking-uri", seq.uri]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(seq.tmp / f"{step}.err", "w") as err, open(seq.tmp / f"{step}.out", "w") as out:
        return subprocess.run(
            args, cwd=seq.tmp, stdout=out, stderr=err, env=env, timeout=120
        ).returncode


# What a user may do next, by the state of the sweep. A new action joins here and in ``FLAGS``
# (and ``_act``, for what it expects). ``client``: --resume through Ray Client (ray://) to a head
# started the default way (``ClientHead``), Ctrl-C'd like the others; never kill -9'd, as the
# driver on the head outlives a killed client for Ray's reconnect grace period.
WHEN_STOPPED = ["resume", "resume", "resume", "client", "again", "overwrite", "table"]
WHEN_FINISHED = ["extend", "again", "resume", "table", "overwrite"]
FLAGS = {"run": (), "again": (), "resume": ("--resume",), "client": ("--resume",),
         "overwrite": ("--overwrite",), "extend": ("--extend",)}  # fmt: skip


class ClientHead:
    """A head started the default way, for the ``client`` action: started at its first use
    (most sequences have none), stopped when the module ends."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.head = tmp, None

    def flags(self) -> tuple[tuple[str, ...], dict[str, str]]:
        """(--address ray://..., the environment that finds its token)."""
        if self.head is None:
            from ray_cluster import start_default_head

            self.head = start_default_head(self.tmp)
        return ("--address", self.head.client), {"HOME": self.head.env["HOME"]}

    def stop(self) -> None:
        if self.head is not None:
            self.head.stop()


@pytest.fixture(scope="module")
def client_head(tmp_path_factory):
    head = ClientHead(tmp_path_factory.mktemp("client_head"))
    yield head
    head.stop()


def _next_action(rng: random.Random, seq: Sequence) -> tuple[str, str, tuple[str, float]]:
    """(action, how it is stopped, at what moment) drawn for the sequence's state."""
    how = rng.choice(["none", "none", "ctrl_c", "ctrl_c_twice", "kill"])
    if seq.state == "none":
        action = "run"
    elif seq.early:
        action = "resume"
    else:
        action = rng.choice(WHEN_STOPPED if seq.state == "stopped" else WHEN_FINISHED)
    if action == "extend" and EXTENDED in seq.sets:
        action = "table"
    if action == "client" and how == "kill":
        how = "ctrl_c"
    # A kill -9 after 1..6 results: killed before its trials ran, a sweep may hold nothing to
    # resume, which is not a Ctrl-C's promise.
    moment = ("results", rng.randint(1, 6)) if how == "kill" else _moment(rng, action)
    return action, how, moment


def _act(
    seq: Sequence,
    step: int,
    action: str,
    how: str,
    moment: tuple[str, float],
    client: ClientHead | None = None,
) -> None:
    """Carry out one action and check its exit code; update what the sequence expects."""
    phase, value = moment
    at = f"{value} results" if phase == "results" else f"{phase} + {value:.1f} s"
    seq.log.append(f"{action}" + (f" stopped by {how} at {at}" if how != "none" else ""))
    if action == "table":
        code = _table(seq, step)
        assert code in (0, 1, 2), code
        return
    if action == "extend":
        seq.sets.append(EXTENDED)
    flags, env = FLAGS[action], None
    if action == "client":
        address, env = client.flags()
        flags = (*flags, *address)
    code = _sweep(seq, step, flags, how, moment, env)
    refused = (action == "again" and seq.state != "none") or (
        action in ("resume", "client") and seq.state != "stopped"
    )
    if refused:  # unless a press in its start-up stopped it first (130), changing nothing
        pressed_first = code == 130 and how.startswith("ctrl_c") and phase == "start"
        assert code == 2 or pressed_first, f"expected a refusal (2), got {code}"
        return
    if action == "extend" and seq.state == "stopped":  # an --extend of an unfinished sweep
        assert code == 2, code
        return
    if code == 2 and action == "extend":  # refused for another reason: say it, do not guess
        raise AssertionError((seq.tmp / f"{step}.err").read_text()[-2000:])
    if action in ("run", "overwrite"):
        seq.parents += 1
    if code == -9:
        assert how == "kill"
        seq.state, seq.early = "stopped", False
    elif code == 130 and action == "run" and not (seq.out / STATE_FILE).exists():
        # stopped before it made anything (its imports, the spec's check): nothing to resume
        # (--resume says so in one line), and the same command starts it
        assert how.startswith("ctrl_c") and phase == "start", phase
        seq.state, seq.early, seq.parents = "none", True, seq.parents - 1
    elif code == 130:
        assert how.startswith("ctrl_c")
        seq.state = "stopped"
        seq.early = phase in EARLY and (action == "run" or seq.early)
    else:
        assert code == 0, f"exit {code}"
        seq.state, seq.early = "finished", False


def _check(seq: Sequence, step: int, canary: Path) -> None:
    err = seq.tmp / f"{step}.err"
    text = err.read_text() if err.exists() else ""
    assert "Traceback" not in text, text[-3000:]
    assert (canary / "keep.txt").read_text() == "mine"
    assert (seq.tmp / "out" / "other" / "keep.txt").read_text() == "mine"
    parents, runs = children(seq.uri, "smoke")
    expected = {seq.parents - 1, seq.parents} if seq.early else {seq.parents}
    assert len(parents) in expected, [p.info.status for p in parents]
    if parents:
        newest = max(parents, key=lambda p: p.info.start_time).info.run_id
        mine = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == newest]
        ids = [r.data.tags["sweep.trial_id"] for r in mine]
        assert len(ids) == len(set(ids)), sorted(ids)
        assert_no_duplicate_steps(seq.uri, mine)


def _final_table_matches(seq: Sequence) -> None:
    spec = load_spec(SMOKE, seq.sets)
    trials = pd.read_csv(seq.out / "trials.csv")
    reference = reference_trials(seq.sets, EXACT)
    keys = list(spec.space)
    merged = trials.merge(reference, on=keys, suffixes=("", "_ref"))
    assert len(merged) == len(reference) == len(trials)
    for name in EXACT:
        expected = merged[f"{name}_ref"].tolist()
        if name.endswith("loss"):  # a Ray worker rounds float32 losses differently in the last bit
            expected = pytest.approx(expected, rel=1e-6)
        assert merged[name].tolist() == expected, name
    assert (seq.out / "table.md").read_text() == render_tables(reference, spec.tables)


@pytest.fixture(scope="module", autouse=True)
def _say_the_seeds(request):
    """The seeds on the terminal as the module starts, whatever pytest captures."""
    source = "CHAOS_SEEDS" if os.environ.get("CHAOS_SEEDS") else f"commit seed {commit_seed()}"
    line = (
        f"chaos: seeds {SEEDS} ({source}, Ray {ray.__version__}); replay: "
        f"CHAOS_SEEDS={','.join(map(str, SEEDS))} python -m pytest tests/test_user_chaos.py"
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line, file=sys.stderr)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_sequence_of_user_actions_loses_nothing(tmp_path, seed, client_head):
    rng = random.Random(seed)
    seq = Sequence(seed, tmp_path)
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("mine")
    (tmp_path / "out" / "other").mkdir(parents=True)
    (tmp_path / "out" / "other" / "keep.txt").write_text("mine")
    n_actions = rng.randint(2, 4)
    step = 0
    try:
        while step < n_actions or seq.state != "finished":
            if step >= n_actions:  # wind down: finish the sweep without stopping it
                action = "resume" if seq.state == "stopped" else "run"
                how, moment = "none", ("results", 0)
            else:
                action, how, moment = _next_action(rng, seq)
            started = time.monotonic()
            _act(seq, step, action, how, moment, client_head)
            acted = time.monotonic()
            _check(seq, step, canary)
            seq.log[-1] += f" ({acted - started:.1f} s, checks {time.monotonic() - acted:.1f} s)"
            step += 1
            assert step < 12, "the sequence did not finish"
        started = time.monotonic()
        code = _table(seq, step)
        assert code == 0
        _check(seq, step, canary)
        seq.log.append(f"table ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        _final_table_matches(seq)
        seq.log.append(f"compared with an uninterrupted run ({time.monotonic() - started:.1f} s)")
        print(f"chaos seed {seed}: {seq.log}")
    except AssertionError as err:
        raise AssertionError(
            f"chaos seed {seed} (replay: CHAOS_SEEDS={seed}), steps: {seq.log}: {err}"
        ) from err

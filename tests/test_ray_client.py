"""A sweep through Ray Client (``--address ray://HOST:PORT``) to a head started the default way
(``ray start --head``: on Ray 2.60 with token authentication on, its token in ~/.ray), run as a
user runs it: the driver goes to the head (``sweeps.runtime.on_head``), every trial reaches
MLflow and ``trials.csv`` before the command returns, and a Ctrl-C here stops the sweep there
so that the printed command, pasted into a shell, finishes it."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from ray_cluster import ROOT, SMOKE, asks_for_token, run_module, start_default_head
from sweep_procs import (
    assert_no_duplicate_steps,
    children,
    ctrl_c,
    fresh_store,
    metric_steps,
    result_lines,
    start_sweep,
    wait_until,
)

pytestmark = pytest.mark.slow

SMALL = ["--set", "base.train.max_steps=10", "--set", "base.train.eval_every=5"]


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    head = start_default_head(tmp_path_factory.mktemp("client_head"))
    try:
        yield head
    finally:
        head.stop()


def _trials_csv_rows(out: os.PathLike) -> int:
    lines = (out / "smoke" / "trials.csv").read_text().strip().splitlines()
    return len(lines) - 1


def test_a_sweep_through_ray_client_records_every_trial(head, tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    result = run_module(
        "sweeps.run", str(SMOKE), *SMALL, "--address", head.client, "--out", str(out),
        "--tracking-uri", uri, env=head.env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    err = result.stderr
    assert result.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "4/4 done" in err  # the head's progress line, shown here
    assert "best trial:" in result.stdout  # and its summary
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(runs) == 4
    assert {(r.info.status, r.data.tags["sweep.status"]) for r in runs} == {
        ("FINISHED", "TERMINATED")
    }
    assert _trials_csv_rows(out) == 4
    assert (out / "smoke" / "table.md").is_file()


def test_ctrl_c_through_ray_client_then_the_printed_command_finishes(head, tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    out = tmp_path / "out"
    env = {**head.env, "PYTHONPATH": str(ROOT), "TUNE_GLOBAL_CHECKPOINT_S": "0.1"}
    flags = ("--address", head.client)
    proc = start_sweep(
        tmp_path, uri, ["base.train.max_steps=200"], flags=flags, new_session=True, env=head.env
    )
    try:
        experiment = out / "smoke" / "ray" / "smoke"
        reported = lambda: any(len(lines) >= 2 for lines in result_lines(experiment).values())  # noqa: E731
        assert wait_until(reported, 240, proc), (tmp_path / "run.err").read_text()[-3000:]
        ctrl_c(proc)
        assert proc.wait(timeout=180) == 130, (tmp_path / "run.err").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    err = (tmp_path / "run.err").read_text()
    assert "Traceback" not in err, err[-3000:]
    lines = err.splitlines()
    command = lines[lines.index(next(x for x in lines if "Finish it with:" in x)) + 1].strip()
    assert f"--address {head.client}" in command and command.endswith("--resume"), command
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "KILLED"

    start = time.monotonic()
    resumed = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=400,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    print(f"\nresumed through Ray Client in {time.monotonic() - start:.0f} s")
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len({r.data.tags["sweep.trial_id"] for r in runs}) == len(runs) == 4
    for run in runs:
        assert (run.data.tags["sweep.status"], run.info.status) == ("TERMINATED", "FINISHED")
        assert metric_steps(uri, run)["val/exact_match"][-1] == 200
    assert_no_duplicate_steps(uri, runs)
    assert _trials_csv_rows(out) == 4


def test_ray_client_without_the_token_is_one_line(head, tmp_path):
    if not asks_for_token(head):
        pytest.skip("this Ray's default head asks for no token: nothing to be missing")
    elsewhere = {**head.env, "HOME": str(tmp_path)}  # a machine without the token file
    result = run_module(
        "sweeps.run", str(SMOKE), "--address", head.client, "--out", str(tmp_path / "out"),
        "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", env=elsewhere, cwd=tmp_path,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: --address: "), result.stderr
    assert "RAY_AUTH_MODE=token" in errors[0] and "~/.ray/auth_token" in errors[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "mlflow.db").exists()

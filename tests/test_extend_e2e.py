"""``--extend`` end to end, with real Ray Tune and MLflow (SQLite): a finished smoke sweep of two
trials, extended by two more grid values, the extending driver SIGKILLed mid-way and resumed with
``--resume``; then the code fingerprint and a dropped grid value, with the extends that train
nothing (no Ray)."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from mlflow import MlflowClient
from sweep_procs import (
    SMOKE,
    assert_no_duplicate_steps,
    call_main,
    children,
    fresh_store,
    kill,
    metric_steps,
    result_lines,
    start_sweep,
    wait_until,
)

from sweeps.analysis.store import LEFT_OUT_TAG
from sweeps.spec.identity import CODE_TAG

pytestmark = pytest.mark.slow

SETS = ["space.train.seed=[0]", "base.train.max_steps=30"]
FIRST = "space.model.d_model=[16,32]"
EXTENDED = "space.model.d_model=[16,32,24,48]"


def _main(tmp_path, uri: str, *args: str) -> tuple[int, str, str]:
    """``python -m sweeps.run`` in-process: (exit code, stdout, stderr)."""
    argv = [str(SMOKE), "--out", str(tmp_path / "out"), "--tracking-uri", uri]
    out = io.StringIO()
    code, err = call_main(argv + [f"--set={s}" for s in SETS] + list(args), out)
    return code, out.getvalue(), err


def _d_model(run) -> int:
    return int(run.data.params["model.d_model"])


def test_extend_trains_only_new_trials_and_resumes_after_a_kill(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    first = start_sweep(tmp_path, uri, [*SETS, FIRST], log="first")
    assert first.wait(timeout=240) == 0, (tmp_path / "first.err").read_text()[-3000:]
    parents, old_runs = children(uri, "smoke")
    old = {r.info.run_id: metric_steps(uri, r) for r in old_runs}
    assert len(old) == 2

    # The extend, killed once a new trial has reported, then resumed.
    extend_dir = tmp_path / "out" / "smoke" / "ray" / "smoke-extend1"
    proc = start_sweep(tmp_path, uri, [*SETS, EXTENDED], log="extend", flags=("--extend",))
    try:
        reported = wait_until(lambda: any(result_lines(extend_dir).values()), 240, proc)
        assert reported, (tmp_path / "extend.err").read_text()[-3000:]
        kill(proc)
        proc = start_sweep(tmp_path, uri, [*SETS, EXTENDED], resume=True, log="resume")
        assert proc.wait(timeout=240) == 0, (tmp_path / "resume.err").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill(proc)
    said = (tmp_path / "extend.err").read_text()
    assert "2 trials reused, 2 to train" in said, said

    # One parent, the same; the two old child runs untouched; one new child per new trial.
    again, runs = children(uri, "smoke")
    assert [p.info.run_id for p in again] == [parents[0].info.run_id]
    assert again[0].info.status == "FINISHED"
    assert len(runs) == 4 and {_d_model(r) for r in runs} == {16, 32, 24, 48}
    for run in runs:
        assert (run.data.tags["sweep.status"], run.info.status) == ("TERMINATED", "FINISHED")
        if run.info.run_id in old:
            assert metric_steps(uri, run) == old[run.info.run_id]  # nothing written again
    assert_no_duplicate_steps(uri, [*runs, *again])
    # The parent's figures again, at the round's step: all four trials now.
    assert metric_steps(uri, again[0])["trials/total"] == [0, 1]
    assert again[0].data.metrics["trials/total"] == 4
    assert len(result_lines(extend_dir)) == 2  # Tune trained the two new trials only
    trials = pd.read_csv(tmp_path / "out" / "smoke" / "trials.csv")
    assert sorted(trials["model.d_model"]) == [16, 24, 32, 48]
    assert set(trials["run_id"]) == {r.info.run_id for r in runs}

    # Other code trained d_model 32: trained again, unless --reuse-stale (dry runs).
    stale = next(r for r in runs if _d_model(r) == 32)
    MlflowClient(uri).set_tag(stale.info.run_id, CODE_TAG, "0.0.0+000000000000")
    code, out, _ = _main(tmp_path, uri, f"--set={EXTENDED}", "--extend", "--dry-run")
    assert code == 0 and "3 trials reused, 1 to train" in out, out
    assert "train  00000  model.d_model=32 train.seed=0" in out

    # Drop d_model 16 and reuse the stale run: nothing to train, no Ray; 16 leaves the tables,
    # not MLflow, and the caption says the code differs.
    dropped = "space.model.d_model=[32,24,48]"
    code, _, err = _main(tmp_path, uri, f"--set={dropped}", "--extend", "--reuse-stale")
    assert code == 0, err[-3000:]
    assert "3 trials reused, 0 to train, 1 child runs left out" in err
    assert "starting a local Ray" not in err
    trials = pd.read_csv(tmp_path / "out" / "smoke" / "trials.csv")
    assert sorted(trials["model.d_model"]) == [24, 32, 48]
    _, runs = children(uri, "smoke")
    left_out = [r for r in runs if LEFT_OUT_TAG in r.data.tags]
    assert len(runs) == 4 and [_d_model(r) for r in left_out] == [16]
    assert "--reuse-stale" in (tmp_path / "out" / "smoke" / "table.md").read_text()
    parents, _ = children(uri, "smoke")
    assert parents[0].data.metrics["trials/total"] == 3
    assert_no_duplicate_steps(uri, parents)

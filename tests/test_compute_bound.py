"""The FLOP-bound arithmetic of ``python -m sweeps.bench --flagship``, checked by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from sweeps.analysis.compute_bound import render_bound, sweep_bound, trial_mfu

PEAKS = {"fp32": 100e9, "bf16": 400e9}  # FLOP/s of one core


def trials() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "trial_id": ["a", "b"],
            "train.precision": ["auto", "bf16"],
            "n_params": [1000, 2000],
            "flops": [2e12, 8e12],
            "time/elapsed_s": [40.0, 50.0],
        }
    )


def test_each_trial_is_measured_against_the_peak_of_its_precision():
    rows = trial_mfu(trials(), PEAKS)
    # auto is fp32 on a CPU: 2e12 / 40 s = 50 GFLOP/s of 100; 8e12 / 50 s = 160 of 400
    assert rows["precision"].tolist() == ["fp32", "bf16"]
    assert rows["gflops_per_s"].tolist() == pytest.approx([50.0, 160.0])
    assert rows["mfu_pct"].tolist() == pytest.approx([50.0, 40.0])


def test_the_sweep_bound_spreads_every_trials_flops_over_the_cores():
    bound = sweep_bound(trials(), PEAKS, n_cores=2, wall_s=60.0)
    # 2e12/100e9 = 20 core-seconds, 8e12/400e9 = 20: 40 over 2 cores = 20 s of 60
    assert bound.flops == pytest.approx(1e13)
    assert bound.bound_s == pytest.approx(20.0)
    assert bound.fraction == pytest.approx(1 / 3)
    text = render_bound(trial_mfu(trials(), PEAKS), bound, PEAKS)
    assert "FLOP bound on 2 cores 20 s; sweep wall 60 s" in text
    assert "fraction of the bound reached 33 %" in text


def test_flagship_from_a_folder_without_its_wall_time_is_one_line(tmp_path):
    import subprocess
    import sys

    trials().to_csv(tmp_path / "trials.csv", index=False)  # but no findings_run.json
    result = subprocess.run(
        [sys.executable, "-m", "sweeps.bench", "--flagship", "--from", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: --from: {tmp_path}: needs trials.csv and findings")
    assert len(result.stderr.strip().splitlines()) == 1


def test_flagship_from_a_finished_sweep_prints_its_bound(tmp_path):
    import json
    import subprocess
    import sys

    # fp32 trials only, as on a CPU without bf16 in hardware: only fp32's peak is measured
    # (bf16's took 57 s there, for a precision no trial used)
    trials().head(1).to_csv(tmp_path / "trials.csv", index=False)
    (tmp_path / "findings_run.json").write_text(json.dumps({"wall_s": 60.0}))
    result = subprocess.run(
        [sys.executable, "-m", "sweeps.bench", "--flagship", "--from", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "| a | fp32 | 1,000 | 2,000 | 40.0 | 50.0 |" in result.stdout
    assert "sweep wall 60 s" in result.stdout
    peaks = next(line for line in result.stdout.splitlines() if line.startswith("peak of one"))
    assert "fp32" in peaks and "bf16" not in peaks, peaks

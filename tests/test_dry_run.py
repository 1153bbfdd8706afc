"""``--dry-run`` says where a sweep would go and how long it would take: its outputs and MLflow
store, how many trials run at once here, and an estimate of its time from its FLOPs and this
machine's measured matmul speed. Nothing starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.runtime.dry_run import dry_run_text
from sweeps.runtime.wall_estimate import START_S, duration, estimate_wall, makespan
from sweeps.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "search_spaces" / "smoke.yaml"


def lines_of(text: str) -> dict[str, str]:
    """The ``name: value`` lines after the trials, by name."""
    return {
        line.split(":", 1)[0]: line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if not line.startswith(" ") and ":" in line
    }


def test_the_dry_run_says_where_it_goes_how_many_at_once_and_how_long(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    text = dry_run_text(load_spec(SMOKE), tmp_path / "results" / "smoke", uri)
    said = lines_of(text)
    assert said["outputs"].startswith(f"{tmp_path / 'results' / 'smoke'} (tables, plots, ")
    assert said["mlflow"] == f"{uri} (experiment 'smoke'; artifacts in {tmp_path / 'mlartifacts'})"
    assert said["at once"].startswith("2 trial(s) (")  # sweep.max_concurrent 2, or 2 CPUs
    estimate = said["estimated time"]
    assert estimate.startswith("~"), estimate
    assert " on this machine (an estimate: 2.67e+09 training FLOPs at 23% " in estimate
    assert "of the matmul peak measured now with 1 thread(s) (fp32 " in estimate, estimate
    assert not list(tmp_path.iterdir())  # nothing made


def test_the_gpu_auto_line_is_short():
    # It spent about 300 characters on the rule's formula, which docs/gpu.md gives.
    (line,) = [x for x in dry_run_text(load_spec(SMOKE)).splitlines() if x.startswith("resour")]
    assert line.startswith("resources per trial: cpu 1, gpu auto (") and len(line) < 90, line
    assert "resources per trial: cpu 1, gpu 0.5" in dry_run_text(
        load_spec(SMOKE, ["sweep.resources.gpu=0.5"])
    )


def test_a_password_is_masked_and_a_cluster_gets_no_estimate(tmp_path):
    text = dry_run_text(load_spec(SMOKE), tmp_path, "http://u:secret@h:5000", address="auto")
    said = lines_of(text)
    assert said["mlflow"] == "http://u:***@h:5000 (experiment 'smoke')" and "secret" not in text
    assert said["at once"].startswith("as many trials as the cluster at auto holds")
    assert "estimated time" not in said


@pytest.mark.parametrize(
    ("jobs", "slots", "ends"),
    [([10, 10, 10], 2, 20), ([30, 10, 10, 10], 2, 30), ([5, 5], 4, 5), ([7], 0, 7)],
)
def test_makespan_starts_each_job_on_the_first_free_slot(jobs, slots, ends):
    assert makespan(jobs, slots) == ends


def test_the_estimate_is_the_slowest_slot_at_a_measured_speed():
    tiny, big = (
        estimate_wall([(1e6, "fp32")], 1, "cpu", 1),
        estimate_wall([(1e12, "fp32")] * 2, 1, "cpu", 1),
    )
    assert START_S < tiny.seconds < big.seconds
    assert "2.00e+12 training FLOPs" in big.why and "1 trial(s) at once" in big.why
    gpu = estimate_wall([(1e12, "bf16")], 4, "cuda", 1)
    assert gpu.seconds is None and "kernel launches" in gpu.why


@pytest.mark.parametrize(
    ("seconds", "shown"), [(42, "~42 s"), (250, "~4.2 min"), (12_600, "~3.5 h")]
)
def test_an_estimate_is_shown_with_the_precision_it_has(seconds, shown):
    assert duration(seconds) == shown

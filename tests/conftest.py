"""Fixtures shared by test modules: a real MLflow server on 127.0.0.1. And two marks: the fault
tests CI runs on the oldest Ray too (``pytest -m faults``, .ci/run) and the soak tests, which run
only when asked for (``pytest -m soak``)."""

from __future__ import annotations

import pytest
from sweep_procs import free_port, start_mlflow_server, stop_mlflow_server

# What leans on Ray's internals (sweeps/cluster/tunefix.py and what it patches), which CI runs on
# the oldest Ray of the supported range as well as the newest: the Tune settings and the version
# gate, a driver killed at random moments then resumed, trials whose workers die, a head started
# the default way and a sweep through Ray Client. The other fault tests (Ctrl-C and user
# actions, the chaos of user actions, --extend after a kill, MLflow outages) run on the newest
# Ray only: their Ray side is the one these cover, and CI's time is bounded (docs/development.md).
# And a job, by Ray's `ray job submit` and by sweeps.submit: Ray before 2.55 deleted a job's
# working dir under its driver (docs/clusters.md, Ray versions).
FAULT_MODULES = {"test_tunefix.py", "test_ray_versions.py"}
FAULT_TESTS = {
    "test_cluster.py::test_ray_job_submit_by_hand_runs_the_sweep",
    "test_cluster.py::test_submitted_job_lands_in_mlflow_server",
    "test_resume.py::test_driver_killed_at_random_points_then_resumed[unpacked]",
    "test_cluster.py::test_default_head_takes_the_token_file",
    "test_cluster.py::test_default_head_without_a_token_is_one_line_quickly",
    "test_ray_client.py::test_a_sweep_through_ray_client_records_every_trial",
    "test_faults.py::test_worker_killed_and_diverging_trial",
    "test_faults.py::test_worker_killed_in_a_pack",
}
# Long variations of what the suite covers otherwise, run with -m soak: the seeded chaos of
# driver and worker kills (one sweep's driver killed 5 times and its workers 3: 200 s in CI, the
# suite's longest test; the random-kill resume, packed and not, the worker kills of test_faults.py
# and the chaos of user actions cover each of its paths).
SOAK_TESTS = {
    "test_chaos.py::test_chaos_driver_and_worker_kills",
    # the GPU acceptance run rehearsed on the CPU (~3 min): before taking it to a GPU
    "test_gpu_bench.py::test_the_acceptance_run_rehearsed_on_the_cpu",
}


def pytest_collection_modifyitems(items):
    for item in items:
        where = item.nodeid.rsplit("/", 1)[-1]
        if where.split("::")[0] in FAULT_MODULES or where in FAULT_TESTS:
            item.add_marker(pytest.mark.faults)
        if where in SOAK_TESTS:
            item.add_marker(pytest.mark.soak)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real ``mlflow server`` on 127.0.0.1 with a SQLite backend; its URL. Stopped after the
    module."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    proc = start_mlflow_server(root, port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_mlflow_server(proc)

"""Fixtures shared by test modules: a real MLflow server on 127.0.0.1. And the fault tests,
which CI runs on both ends of the supported Ray range (``pytest -m faults``, .ci/run)."""

from __future__ import annotations

import pytest
from sweep_procs import free_port, start_mlflow_server, stop_mlflow_server

# What depends most on Tune's behaviour: resume after kills and Ctrl-C, chaos, worker kills, the
# Tune settings, the version gate, a sweep submitted to a head started the default way, a sweep
# through Ray Client and one by Ray's own job CLI, and a trial errored for good that a resume
# restarts. Not here, though in test_faults.py: the MLflow outages,
# which the driver's outbox rides out the same way under any Ray; and the packed twin of the
# random-kill resume, whose Tune side is the unpacked one's (CI's time on the oldest Ray).
FAULT_MODULES = {
    "test_resume.py",
    "test_extend_e2e.py",
    "test_chaos.py",
    "test_tunefix.py",
    "test_ray_versions.py",
    "test_user_actions.py",
    "test_user_chaos.py",
    "test_ray_client.py",
}
FAULT_TESTS = {
    "test_cluster.py::test_default_head_takes_the_token_file",
    "test_cluster.py::test_default_head_without_a_token_is_one_line_quickly",
    "test_cluster.py::test_ray_job_submit_by_hand_runs_the_sweep",
    "test_loss_corners.py::test_a_trial_errored_for_good_then_restarted_by_resume_ends_with_its_real_summary",
    "test_faults.py::test_worker_killed_and_diverging_trial",
    "test_faults.py::test_worker_killed_in_a_pack",
}
NOT_FAULTS = {"test_resume.py::test_driver_killed_at_random_points_then_resumed[packed]"}


def pytest_collection_modifyitems(items):
    for item in items:
        where = item.nodeid.rsplit("/", 1)[-1]
        if where in NOT_FAULTS:
            continue
        if where.split("::")[0] in FAULT_MODULES or where.split("[")[0] in FAULT_TESTS:
            item.add_marker(pytest.mark.faults)


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

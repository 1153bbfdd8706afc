"""Fixtures shared by test modules: a real MLflow server on 127.0.0.1. And two marks: the fault
tests CI runs on the oldest Ray too (``pytest -m faults``, .ci/run) and the soak tests, which run
only when asked for (``pytest -m soak``)."""

from __future__ import annotations

import pytest
from sweep_procs import free_port, start_mlflow_server, stop_mlflow_server

# What leans on Ray's internals (sweeps/cluster/tunefix.py and what it patches), which CI runs on
# the oldest Ray of the supported range as well as the newest: the Tune settings and the version
# gate (each patch with a test of its own: a snapshot copy cut short, a trial killed during a
# save, a trial lost in a reused actor's reset), trials whose workers die, a head started the
# default way and a sweep through Ray Client. The driver killed at random moments then resumed
# runs on request (-m soak, below): its Ray side is Tune's restore, whose patched parts the Tune
# settings' tests take on both (98 s of the oldest stage's 452). The other fault tests (Ctrl-C
# and user actions, the chaos of user actions, --extend after a kill, MLflow outages) run on the
# newest Ray only: their Ray side is the one these cover, and CI's time is bounded
# (docs/development.md).
# And a job, by Ray's `ray job submit`: Ray before 2.55 deleted a job's working dir under its
# driver (docs/clusters.md, Ray versions). One test per Ray path, to keep CI inside 45 minutes:
# sweeps.submit's job (the same Ray job path as `ray job submit`), the head with a token file
# (the same auth path as the head without one) and the worker killed beside a diverging trial
# (the same restore as the pack's) run on the newest Ray only (165 s of the oldest stage's 560),
# and so does the worker killed in a pack (27 s of a 1,418 s suite on 2026-11-29): a restored
# trial's Ray side is the one test_tunefix.py's killed-during-a-save test takes on both.
FAULT_MODULES = {"test_tunefix.py", "test_ray_versions.py"}
FAULT_TESTS = {
    "test_cluster.py::test_ray_job_submit_by_hand_runs_the_sweep",
    "test_cluster.py::test_default_head_without_a_token_is_one_line_quickly",
    "test_ray_client.py::test_a_sweep_through_ray_client_records_every_trial",
}
# Long variations of what the suite covers otherwise, run with -m soak: the seeded chaos of
# driver and worker kills (one sweep's driver killed 5 times and its workers 3: 200 s in CI, the
# suite's longest test; the random-kill resume, packed and not, the worker kills of test_faults.py
# and the chaos of user actions cover each of its paths).
SOAK_TESTS = {
    "test_chaos.py::test_chaos_driver_and_worker_kills",
    # Variations whose path a test of the suite takes too (about 85 s each on 2 cores): the
    # random-kill resume of packs (a driver killed mid-trial, and a pack's worker killed and
    # restored from its checkpoint: test_faults.py); Ctrl-C pressed twice (two presses are
    # among the chaos of user actions' moves; test_cli.py's second press while stopping); an MLflow
    # outage ridden out live (an outage with the driver killed in it, and the outbox's retries
    # against a real server: test_outbox.py); trials on both nodes of a two-node cluster (the
    # mixed cluster of test_placement_cluster.py).
    "test_resume.py::test_driver_killed_at_random_points_then_resumed[packed]",
    "test_user_actions.py::test_ctrl_c_stops_resumably_and_resume_finishes[twice]",
    # The unpacked random-kill resume (52 s on 2026-11-29, the suite's second longest): a
    # driver killed mid-trial then resumed stays in the suite four times (test_resume.py's
    # mid-trial kill, the kill during an MLflow outage, --extend after a kill, the chaos of user
    # actions); Ctrl-C pressed once (29 s): the suite presses it while Ray starts and while the
    # tables are written (test_user_actions.py), as a cluster's driver connects, mid-sweep
    # through Ray Client, and at random moments (the chaos of user actions).
    "test_resume.py::test_driver_killed_at_random_points_then_resumed[unpacked]",
    "test_user_actions.py::test_ctrl_c_stops_resumably_and_resume_finishes[once]",
    # whole sweeps timed packed and not (24 s): the bench's pack path at a tiny size stays
    # (test_bench_pack_at_a_tiny_size), and the packed sweep itself (test_pack_sweep.py)
    "test_pack_sweep.py::test_bench_pack_of_whole_sweeps_at_a_tiny_size",
    "test_faults.py::test_mlflow_outage_mid_sweep_loses_no_metric",
    "test_cluster.py::test_trials_land_on_both_nodes",
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

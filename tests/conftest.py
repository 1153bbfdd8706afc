"""Fixtures shared by test modules: a real MLflow server on 127.0.0.1."""

from __future__ import annotations

import pytest
from sweep_procs import free_port, start_mlflow_server, stop_mlflow_server


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

"""What the project prints and sends never shows a secret: a password in a tracking URI is
masked wherever it is printed and travels to a submitted job in its environment, not its
command line; a Ray token bound for a non-local plain-HTTP address is warned about."""

from __future__ import annotations

import argparse

import pytest

from sweeps.analysis.store import has_credentials, masked
from sweeps.cluster import auth
from sweeps.cluster.jobs import job_entrypoint, job_env

SECRET_URI = "http://alice:s3cret@mlflow.example.com:5000"


def test_a_password_in_a_uri_is_masked():
    assert masked(SECRET_URI) == "http://alice:***@mlflow.example.com:5000"
    assert has_credentials(SECRET_URI)
    for plain in ("http://127.0.0.1:5000", "sqlite:////tmp/x/mlflow.db", "https://h/p?q=1"):
        assert masked(plain) == plain and not has_credentials(plain)


def test_the_summary_never_prints_the_password(tmp_path):
    from sweeps.runtime.report import _report
    from sweeps.spec.sweep_spec import parse_spec

    spec = parse_spec({"sweep": {"name": "s"}, "space": {"model.d_model": [16]}})
    text = _report(spec, tmp_path, SECRET_URI, "run123", 1.0, 0)
    assert "s3cret" not in text and "alice:***@" in text


def test_a_submitted_job_gets_the_uri_in_its_environment_not_its_command():
    args = argparse.Namespace(
        spec="search_spaces/smoke.yaml", overrides=[], out=None, tracking_uri=SECRET_URI,
        storage=None, storage_shared=False, resume=False, overwrite=False,
    )  # fmt: skip
    command = job_entrypoint(args)
    assert "s3cret" not in command and "--tracking-uri" not in command
    assert job_env(args) == {"MLFLOW_TRACKING_URI": SECRET_URI}
    args.tracking_uri = "http://127.0.0.1:5000"
    assert "--tracking-uri http://127.0.0.1:5000" in job_entrypoint(args) and not job_env(args)


@pytest.mark.parametrize(
    ("address", "warns"),
    [
        ("http://10.1.2.3:8265", True),
        ("http://head.example.com:8265", True),
        ("https://head.example.com:8265", False),
        ("http://127.0.0.1:8265", False),
        ("http://localhost:8265", False),
    ],
)
def test_a_token_over_plain_http_to_another_machine_is_warned_about(address, warns, capsys):
    assert auth.warn_plain_http(address) is warns
    err = capsys.readouterr().err
    assert (err.count("\n") == 1 and err.startswith("warning: ")) if warns else err == ""

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


def _shell_reads(argument: str, env: dict[str, str]) -> str:
    """What bash makes of ``argument`` in ``env``."""
    import subprocess

    done = subprocess.run(
        ["bash", "-c", f"printf %s {argument}"], env=env, capture_output=True, text=True
    )
    return done.stdout


def test_the_resume_command_names_the_variable_that_holds_a_password(tmp_path, monkeypatch):
    """A stopped sweep's --resume command works as pasted: every option it needs, and a
    password as the variable that holds it, never printed, never ``***``."""
    from sweeps.runtime.rerun import resume_command

    out = tmp_path / "out" / "smoke"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    lines = resume_command(
        out, SECRET_URI, address="ray://head:10001", storage="s3://b/x", storage_shared=True
    )
    text = "\n".join(lines)
    assert "s3cret" not in text and "***" not in text
    assert lines[0].startswith("export MLFLOW_TRACKING_PASSWORD=")
    command = lines[-1]
    for part in ("--address ray://head:10001", "--storage s3://b/x", "--storage-shared"):
        assert part in command
    assert command.endswith("--resume")
    argument = command.split("--tracking-uri ", 1)[1].split(" --address")[0]
    assert _shell_reads(argument, {"MLFLOW_TRACKING_PASSWORD": "s3cret"}) == SECRET_URI

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")  # exported already: no reminder
    assert len(resume_command(out, SECRET_URI)) == 1
    monkeypatch.setenv("MLFLOW_TRACKING_URI", SECRET_URI)  # the URI itself from the variable
    (command,) = resume_command(out, SECRET_URI)
    assert '--tracking-uri "$MLFLOW_TRACKING_URI"' in command
    plain = "sqlite:////tmp/my dir/mlflow.db"
    (command,) = resume_command(out, plain)
    assert "--tracking-uri 'sqlite:////tmp/my dir/mlflow.db'" in command

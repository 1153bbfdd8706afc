"""The findings report: claim checks on hand-made trials, and the command on a tiny real sweep."""

from __future__ import annotations

import pandas as pd
import pytest

from sweeps import findings
from sweeps.claims import CLAIMS


def test_grokking_check_says_which_decay_groks():
    trials = pd.DataFrame(
        {
            "optim.weight_decay": [0.0, 0.0, 1.0, 1.0],
            "val/exact_match": [0.02, 0.03, 0.97, 0.99],
            "val/steps_to_threshold": [None, None, 1500.0, 2500.0],
        }
    )
    sentences = CLAIMS["grokking"].check({"main": trials})
    assert sentences[0].startswith("weight decay 0: 0 of 2 seeds grok")
    assert "2 of 2 seeds grok" in sentences[1]
    assert "2,000 ± 707" in sentences[1]
    assert sentences[-1].endswith("**met**.")


def test_grokking_check_fails_when_a_seed_does_not_grok():
    trials = pd.DataFrame({"optim.weight_decay": [0.0, 1.0], "val/exact_match": [0.0, 0.5]})
    assert CLAIMS["grokking"].check({"main": trials})[-1].endswith("**not met**.")


def test_size_ladder_check_names_the_rung_nearest_the_seed_model():
    trials = pd.DataFrame(
        {"n_params": [77_000, 250_000, 1_400_000], "test/exact_match": [0.1, 0.6, 0.995]}
    )
    sentences = CLAIMS["model_size"].check({"main": trials})
    assert sentences[0] == "Best cell: 99.5 % test exact match (bar >= 99.0 %: **met**)."
    assert "rises: **met**" in sentences[1]
    assert "(250,000 parameters) reaches 60.0 %, against the seed's 37.6 %" in sentences[2]


@pytest.mark.slow
def test_findings_command_runs_a_space_and_rebuilds_the_report_from_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["smoke", "--results", str(tmp_path / "results"), "--tracking-uri", uri]
    out = tmp_path / "docs"
    tiny = ["--set", "base.train.max_steps=10", "--set", "space.model.d_model=[16]"]
    assert findings.main([*common, "--run", *tiny, "--out", str(out)]) == 0
    report = (out / "findings.md").read_text()
    assert "## smoke" in report
    assert (
        "Command: `python -m sweeps.run search_spaces/smoke.yaml --set base.train.max_steps=10"
        in report
    )
    assert "| 16 " in report and "val/exact_match" in report
    assert (out / "findings" / "smoke.png").stat().st_size > 1000
    # Without --run the same report comes back from MLflow and the run record alone.
    again = tmp_path / "again"
    assert findings.main([*common, "--out", str(again)]) == 0
    assert (again / "findings.md").read_text() == report


def test_findings_names_a_missing_space(tmp_path, capsys):
    code = findings.main(["nonesuch", "--results", str(tmp_path), "--out", str(tmp_path)])
    assert code == 2
    assert "space 'nonesuch': no file search_spaces/nonesuch.yaml" in capsys.readouterr().err

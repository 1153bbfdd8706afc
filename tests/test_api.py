"""docs/api.md's "Compare sweeps" and "From a notebook" examples, run as written on two real smoke
sweeps (a real Ray, a real SQLite MLflow in the project folder), then every call of
``sweeps.api`` checked against the files the sweeps wrote."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sweeps import api

ROOT = Path(__file__).resolve().parents[1]
# The page the examples are on (the README links it).
API_PAGE = ROOT / "docs" / "api.md"

pytestmark = pytest.mark.slow


def doc_block(page: Path, heading: str, language: str) -> str:
    """The first ``language`` code block under ``heading`` in the page ``page``."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index(f"\n{heading}\n") :]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


def _run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project folder where the page's commands ran in order: the longer sweep (bash),
    the notebook block (which runs the smoke sweep through ``sweeps.run``), the comparison."""
    tmp = tmp_path_factory.mktemp("project")
    (tmp / "search_spaces").symlink_to(ROOT / "search_spaces")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    long_sweep, compare_line = doc_block(API_PAGE, "## Compare sweeps", "bash").strip().splitlines()
    python = [sys.executable if w == "python" else w for w in shlex.split(long_sweep)]
    done = _run(python, tmp, env)
    assert done.returncode == 0, done.stderr[-2000:]
    # The notebook block in a fresh interpreter, keeping what its sweeps.run call returned.
    block = doc_block(API_PAGE, "## From a notebook", "python")
    assert block.count("trials = sweeps.run_spec(") == 1
    block = block.replace("trials = sweeps.run_spec(", "ran = trials = sweeps.run_spec(")
    block += "\nran.to_csv('ran.csv', index=False)\n"
    notebook = _run([sys.executable, "-c", block], tmp, env)
    assert notebook.returncode == 0, notebook.stderr[-2000:]
    python = [sys.executable if w == "python" else w for w in shlex.split(compare_line)]
    compared = _run(python, tmp, env)
    return {
        "tmp": tmp,
        "uri": f"sqlite:///{tmp / 'mlflow.db'}",
        "a": tmp / "results" / "smoke",
        "b": tmp / "results" / "smoke_long",
        "notebook": notebook,
        "compared": compared,
    }


def _means(folder: Path, metric: str) -> pd.Series:
    return pd.read_csv(folder / "trials.csv").groupby("model.d_model")[metric].mean()


def test_run_returns_the_trials_the_sweep_wrote(project):
    ran = pd.read_csv(project["tmp"] / "ran.csv")
    written = pd.read_csv(project["a"] / "trials.csv")
    pd.testing.assert_frame_equal(ran, written)
    assert len(ran) == 4 and set(ran["train.max_steps"]) == {40}  # the notebook's --set
    assert (project["tmp"] / "mlflow.db").is_file()  # the default store, as the command's
    assert "smoke_long - smoke" in project["notebook"].stdout


def test_the_readme_comparison_differences_are_b_minus_a_per_cell(project):
    compared = project["compared"]
    assert compared.returncode == 0, compared.stderr
    out = project["tmp"] / "results" / "compare"
    assert compared.stdout == (out / "compare.md").read_text(encoding="utf-8")
    assert (out / "compare.png").stat().st_size > 0
    frame = pd.read_csv(out / "compare.csv", index_col=0)
    expected = _means(project["b"], "val/loss") - _means(project["a"], "val/loss")
    assert frame["smoke_long - smoke"].tolist() == pytest.approx(expected.tolist())
    assert expected.abs().min() > 0  # twice the steps: a real difference to get right


def test_compare_reads_mlflow_names_and_parent_runs_as_the_folders(project):
    state = pd.read_json(project["b"] / "sweep.json", typ="series")
    by_folder = api.compare_sweeps(project["a"], project["b"], metric="val/loss")
    by_store = api.compare_sweeps(
        "smoke", f"run:{state['parent_run_id']}", tracking_uri=project["uri"], metric="val/loss"
    )
    pd.testing.assert_frame_equal(by_folder, by_store, check_dtype=False)
    # A third sweep is compared with the first too; one sweep twice is told apart by where.
    three = api.compare_sweeps(project["a"], project["b"], "smoke", tracking_uri=project["uri"])
    first = str(project["a"])
    assert three[f"smoke - {first}"].tolist() == [0.0, 0.0]
    assert f"{project['b']} - {first}" in three.columns


def test_load_trials_from_the_folder_and_from_mlflow_agree(project):
    folder = api.load_trials(project["a"])
    stored = api.load_trials("smoke", tracking_uri=project["uri"])
    assert list(folder.columns) == list(stored.columns)
    assert list(folder.columns[:4]) == ["trial_id", "status", "model.d_model", "train.seed"]
    for column in ("trial_id", "model.d_model", "val/loss", "convergence", "n_params"):
        assert folder[column].tolist() == stored[column].tolist(), column


def test_load_curves_end_at_the_trials_final_values(project):
    curves = api.load_curves(project["a"], metrics=["val/loss"])
    assert list(curves.columns) == ["trial_id", "metric", "step", "value"]
    assert set(curves["metric"]) == {"val/loss"} and curves["step"].max() == 40
    last = curves.sort_values("step").groupby("trial_id")["value"].last()
    trials = api.load_trials(project["a"]).set_index("trial_id")
    assert last.tolist() == pytest.approx(trials.loc[last.index, "val/loss"].tolist())
    default = api.load_curves("smoke", tracking_uri=project["uri"])
    assert set(default["metric"]) == {"val/exact_match", "train/loss"}


def test_tables_are_the_ones_the_sweep_wrote(project):
    trials = api.load_trials(project["a"])
    tables = api.tables(trials, project["a"])
    assert tables.markdown == (project["a"] / "table.md").read_text(encoding="utf-8")
    written = pd.read_csv(project["a"] / "table.csv")
    pd.testing.assert_frame_equal(tables.frames["smoke"], written, check_dtype=False)
    own = api.tables(trials, {"name": "loss", "rows": ["model.d_model"], "values": ["val/loss"]})
    means = own.frames["loss"].set_index("model.d_model")["val/loss:mean"]
    assert means.tolist() == pytest.approx(_means(project["a"], "val/loss").tolist())
    assert "## loss" in own._repr_markdown_()


def test_plots_are_written_as_pngs(project, tmp_path):
    trials = api.load_trials(project["a"])
    curves = api.load_curves(project["a"])
    with_curves = api.plots(trials, project["a"], tmp_path / "with", curves=curves)
    assert {p.name for p in with_curves} == {"exact_match_vs_params.png", "training_curves.png"}
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in with_curves)
    without = api.plots(trials, None, tmp_path / "without")
    assert "training_curves.png" not in {p.name for p in without}
    assert (project["tmp"] / "figures" / "training_curves.png").is_file()  # the page's call


def test_run_refuses_a_bad_spec_before_anything_starts(project, tmp_path):
    from sweeps.spec.spec_file import SpecError, read_yaml

    spec = read_yaml(ROOT / "search_spaces" / "smoke.yaml")
    with pytest.raises(SpecError, match=r"space.model.d_model: expected a non-empty list"):
        api.run_spec(
            spec, sets=["space.model.d_model=[]"], out=tmp_path, tracking_uri=project["uri"]
        )
    assert list(tmp_path.iterdir()) == []

"""``python -m sweeps.compare`` and ``sweeps.analysis.comparison`` on trials built by hand: the
cells, the differences, the per-cell choice on validation, and one line for every mistake.
(The real sweeps, and the notebook calls, are in test_api.py.)"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sweeps.analysis.comparison import Side, compare, shared_keys, to_markdown
from sweeps.compare import main as compare_main
from sweeps.spec.table_block import TableSpec

ROOT = Path(__file__).resolve().parents[1]


def _trials(d_models, lrs, seeds, val, test) -> pd.DataFrame:
    """One trial per (d_model, lr, seed); ``val``/``test``: functions of (d_model, lr, seed)."""
    rows = []
    for i, (d, lr, seed) in enumerate(itertools.product(d_models, lrs, seeds)):
        rows.append(
            {
                "trial_id": f"t_{i:05d}",
                "status": "TERMINATED",
                "model.d_model": d,
                "optim.lr": lr,
                "train.seed": seed,
                "val/exact_match": val(d, lr, seed),
                "test/exact_match": test(d, lr, seed),
            }
        )
    return pd.DataFrame(rows)


def _lr_sweep() -> pd.DataFrame:
    # lr 1e-2 is best on validation, 1e-3 best on test: the cell must report 1e-2's test.
    return _trials(
        [16, 32],
        [1e-3, 1e-2],
        [0, 1],
        val=lambda d, lr, s: 0.5 + (0.2 if lr == 1e-2 else 0) + d / 1000 + s / 100,
        test=lambda d, lr, s: 0.4 + (0.3 if lr == 1e-3 else 0) + d / 1000 + s / 100,
    )


def _plain_sweep(offset: float = 0.1) -> pd.DataFrame:
    return _trials(
        [16, 32],
        [1e-3],
        [0, 1],
        val=lambda d, lr, s: 0.6 + offset + s / 100,
        test=lambda d, lr, s: 0.5 + offset + d / 1000 + s / 100,
    )


def test_a_cell_reports_test_at_the_validation_choice_and_the_difference_per_cell():
    a, b = Side("lr", _lr_sweep()), Side("plain", _plain_sweep())
    result = compare([a, b], "test/exact_match")
    frame = result.frame
    assert result.keys == ("model.d_model",)
    assert list(frame.index) == [16, 32]
    # lr 1e-2 chosen on validation in both cells; its test figure is reported, not 1e-3's.
    assert list(frame["lr:optim.lr"]) == [0.01, 0.01]
    assert frame.loc[16, "lr:mean"] == pytest.approx(0.4 + 0.016 + 0.005)
    assert frame.loc[16, "plain:mean"] == pytest.approx(0.6 + 0.016 + 0.005)
    assert frame.loc[32, "plain - lr"] == pytest.approx(0.2)
    assert result.selections["plain"] is None  # varies nothing but the shared key and seeds
    text = to_markdown(result)
    assert "| model.d_model |" in text and "+0.200" in text
    assert "the optim.lr with the best mean val/exact_match (max)" in text
    assert "never selected on" in text


def test_selecting_on_a_test_metric_is_refused():
    with pytest.raises(ValueError, match="held-out"):
        compare(
            [Side("a", _lr_sweep()), Side("b", _plain_sweep())],
            "test/exact_match",
            None,
            "test/exact_match",
        )


def test_shared_keys_prefer_the_tables_keys_and_never_the_seed():
    with_table = Side("a", _lr_sweep(), tables=[TableSpec("t", rows=("optim.lr",))])
    other = Side(
        "b", _lr_sweep(), tables=[TableSpec("t", rows=("optim.lr",), columns=("model.d_model",))]
    )
    assert shared_keys([with_table, other]) == ["optim.lr"]
    # Without tables in common: the swept dimensions in common, seeds left out.
    assert shared_keys([Side("a", _lr_sweep()), Side("b", _lr_sweep())]) == [
        "model.d_model",
        "optim.lr",
    ]


def test_three_sweeps_are_each_compared_with_the_first():
    sides = [Side(name, _plain_sweep(off)) for name, off in (("a", 0.0), ("b", 0.1), ("c", 0.25))]
    frame = compare(sides, "val/exact_match").frame
    assert list(frame.columns[-2:]) == ["b - a", "c - a"]
    assert frame["c - a"].tolist() == pytest.approx([0.25, 0.25])


def _folder(root: Path, name: str, trials: pd.DataFrame) -> Path:
    folder = root / name
    folder.mkdir()
    trials.to_csv(folder / "trials.csv", index=False)
    return folder


def test_the_command_prints_and_writes_the_comparison(tmp_path, capsys):
    a = _folder(tmp_path, "lr", _lr_sweep())
    b = _folder(tmp_path, "plain", _plain_sweep())
    out = tmp_path / "cmp"
    assert compare_main([str(a), str(b), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert stdout == (out / "compare.md").read_text(encoding="utf-8")
    assert "## compare: test/exact_match" in stdout
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    written = pd.read_csv(out / "compare.csv", index_col=0)
    assert written["plain - lr"].tolist() == pytest.approx([0.2, 0.2])


@pytest.mark.parametrize(
    "args, message",
    [
        (["{a}", "{tmp}/missing"], "missing: no such folder"),
        (["{a}"], "compare needs two or more"),
        (["{a}", "{b}", "--metric", "val/nope"], "metric: 'val/nope': not a column of sweep"),
        (["{a}", "{seeds}"], "keys: none shared"),
        (["{a}", "{b}", "--keys", "model.n_layer"], "keys: 'model.n_layer': not a column"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    paths = {
        "a": _folder(tmp_path, "lr", _lr_sweep()),
        "b": _folder(tmp_path, "plain", _plain_sweep()),
        "seeds": _folder(tmp_path, "seeds", _plain_sweep().query("`model.d_model` == 16")),
        "tmp": tmp_path,
    }
    argv = [a.format(**paths) for a in args] + ["--out", str(tmp_path / "cmp")]
    assert compare_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert not (tmp_path / "cmp").exists()


def test_the_module_runs_and_a_missing_folder_is_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "sweeps.compare", "nope/a", "nope/b"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: nope/a: no such folder"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_import_sweeps_stays_light_and_reexports_the_api():
    code = (
        "import sys, sweeps; "
        "heavy = [m for m in ('pandas', 'mlflow', 'ray') if m in sys.modules]; "
        "assert not heavy, heavy; "
        "from sweeps import api; "
        "assert all(getattr(sweeps, n) is getattr(api, n) for n in sweeps.__all__); "
        "assert all(getattr(api, n).__doc__ and '>>>' in getattr(api, n).__doc__ "
        "for n in sweeps.__all__)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr

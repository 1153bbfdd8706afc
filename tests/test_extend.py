"""``--extend``'s keying and split (sweeps.spec.identity, sweeps.runtime.extend), without Ray:
which finished child runs a changed spec reuses, which trials it trains, which runs it leaves
out, and the one-line refusals. The end-to-end run is tests/test_extend_e2e.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from sweep_procs import SMOKE, call_main

from arith.config import from_dict
from sweeps.runtime.extend import (
    DUPLICATE,
    NO_KEY,
    NOT_FINISHED,
    NOT_IN_SPEC,
    ChildRun,
    check_grid,
    split,
    wanted_trials,
)
from sweeps.runtime.state import SweepError
from sweeps.spec.identity import code_fingerprint, code_note, config_key
from sweeps.spec.sweep_spec import load_spec

CODE = "0.1.0+aaaaaaaaaaaa"


def test_config_key_is_the_resolved_config_not_its_spelling():
    """The key hashes what train() receives: the same config from differently ordered dicts
    is one key, one changed value another."""
    config = from_dict({"model": {"d_model": 32, "n_layer": 1}, "train": {"seed": 0}})
    reordered = from_dict({"train": {"seed": 0}, "model": {"n_layer": 1, "d_model": 32}})
    other = from_dict({"model": {"d_model": 32, "n_layer": 1}, "train": {"seed": 1}})
    assert config_key(config) == config_key(reordered)
    assert config_key(config) != config_key(other)
    canonical = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"))
    assert len(config_key(config)) == 64 and canonical  # sha256 hex of the canonical JSON


def test_code_fingerprint_is_the_version_and_a_hash_of_arith():
    version, digest = code_fingerprint().split("+")
    assert version and len(digest) == 12 and int(digest, 16) >= 0


def test_code_fingerprint_follows_torchs_version(monkeypatch):
    from sweeps.spec import identity

    before = code_fingerprint()
    real = identity.metadata.version
    monkeypatch.setattr(
        identity.metadata, "version", lambda name: "0.0.1" if name == "torch" else real(name)
    )
    code_fingerprint.cache_clear()
    try:
        assert code_fingerprint() != before
    finally:
        monkeypatch.undo()
        code_fingerprint.cache_clear()


@pytest.mark.parametrize(
    ("status", "tags", "whole"),
    [
        ("FINISHED", {"sweep.status": "TERMINATED", "sweep.stopped_reason": "max_steps"}, True),
        ("FINISHED", {"sweep.status": "EARLY_STOPPED", "sweep.stopped_reason": "early_stopping",
                      "sweep.summary": "train"}, True),
        # cut short by ASHA or the time budget: FINISHED with a stand-in summary
        ("FINISHED", {"sweep.status": "EARLY_STOPPED", "sweep.stopped_reason": "scheduler",
                      "sweep.summary": "stand-in"}, False),
        ("FINISHED", {"sweep.status": "TERMINATED", "sweep.stopped_reason": "time_budget",
                      "sweep.summary": "stand-in"}, False),
        ("FAILED", {"sweep.status": "ERROR", "sweep.stopped_reason": "error"}, False),
        ("RUNNING", {"sweep.status": "RUNNING"}, False),
    ],
)  # fmt: skip
def test_only_a_trial_that_ran_to_its_end_is_reused(status, tags, whole):
    from sweeps.runtime.extend import ran_to_its_end

    assert ran_to_its_end(status, tags) is whole


def test_hardware_note_says_when_trials_ran_on_different_devices_or_precisions():
    import pandas as pd

    from sweeps.spec.identity import hardware_note

    alike = pd.DataFrame({"hardware.device": ["cpu", "cpu"], "hardware.precision": ["fp32"] * 2})
    assert hardware_note(alike) == "" and hardware_note(pd.DataFrame({"x": [1]})) == ""
    gpus = pd.DataFrame(
        {"hardware.device": ["cuda:0", "cuda:1"], "hardware.precision": ["bf16"] * 2}
    )
    assert hardware_note(gpus) == ""  # one kind of device: which GPU does not matter
    mixed = pd.DataFrame(
        {
            "hardware.device": ["cpu", "cuda:0", "cuda:0"],
            "hardware.precision": ["fp32", "bf16", "bf16"],
        }
    )
    assert hardware_note(mixed) == (
        " Warning: trials ran on different hardware (cpu fp32: 1; cuda bf16: 2 trials)."
    )
    # a precision the spec varies on purpose (width_vs_depth: bf16 from width 64) is no warning
    derived = pd.DataFrame(
        {"hardware.device": ["cpu"] * 3, "hardware.precision": ["fp32", "bf16", "bf16"],
         "train.precision": ["fp32", "bf16", "bf16"]}
    )  # fmt: skip
    assert hardware_note(derived) == ""
    auto = derived.assign(**{"train.precision": ["auto"] * 3})  # one ask, resolved two ways
    assert hardware_note(auto).startswith(" Warning: trials ran on different hardware")
    # trials ASHA stopped have no record (no summary): no "unknown" hardware of their own
    stopped = pd.concat([alike, pd.DataFrame({"hardware.device": [None] * 3})])
    assert hardware_note(stopped) == ""


def _wanted(*keys: str) -> list[tuple[dict, str]]:
    return [({"model.d_model": i}, key) for i, key in enumerate(keys)]


def _run(run_id: str, key: str, code: str = CODE, finished: bool = True) -> ChildRun:
    return ChildRun(run_id, f"t_{run_id}", key, code, finished)


def test_finished_same_config_same_code_is_reused_the_rest_trained():
    runs = [_run("r1", "k1"), _run("r2", "k2")]
    found = split(_wanted("k1", "k2", "k3"), runs, CODE, round_=1)
    assert [run.run_id for _, run in found.reused] == ["r1", "r2"]
    assert found.train == [{"model.d_model": 2}]
    assert found.left_out == {} and found.stale == []


def test_other_code_is_trained_again_unless_reuse_stale():
    runs = [_run("r1", "k1", code="0.1.0+bbbbbbbbbbbb"), _run("r2", "k2")]
    strict = split(_wanted("k1", "k2"), runs, CODE, round_=1)
    assert [run.run_id for _, run in strict.reused] == ["r2"]
    assert strict.train == [{"model.d_model": 0}]
    assert "other arith code (0.1.0+bbbbbbbbbbbb)" in strict.left_out["r1"]
    stale = split(_wanted("k1", "k2"), runs, CODE, round_=1, reuse_stale=True)
    assert [run.run_id for _, run in stale.reused] == ["r1", "r2"]
    assert [run.run_id for run in stale.stale] == ["r1"] and stale.train == []


def test_same_code_is_preferred_to_stale_for_one_config():
    runs = [_run("old", "k1", code="other"), _run("new", "k1")]
    found = split(_wanted("k1"), runs, CODE, round_=2, reuse_stale=True)
    assert [run.run_id for _, run in found.reused] == ["new"] and found.stale == []
    assert found.left_out == {"old": DUPLICATE.format(round=2)}


def test_unfinished_runs_are_retrained_and_removed_values_left_out():
    """An errored run of a wanted config is trained again as a new run (the old one is left
    out, so the tables hold one row per trial); a run of a value the spec dropped is left out,
    not deleted."""
    runs = [_run("err", "k1", finished=False), _run("gone", "k9"), _run("ok", "k2")]
    found = split(_wanted("k1", "k2"), runs, CODE, round_=1)
    assert found.train == [{"model.d_model": 0}]
    assert found.left_out == {
        "err": NOT_FINISHED.format(round=1),
        "gone": NOT_IN_SPEC.format(round=1),
    }


def test_runs_without_a_config_key_are_never_reused():
    """Child runs logged before sweep.config_key existed: their trials are trained again."""
    found = split(_wanted("k1"), [_run("old", None)], CODE, round_=1, reuse_stale=True)
    assert found.reused == [] and found.train == [{"model.d_model": 0}]
    assert found.left_out == {"old": NO_KEY.format(round=1)}


def test_repeats_of_one_config_need_one_run_each():
    runs = [_run("a", "k1")]
    found = split([({"train.seed": 0}, "k1"), ({"train.seed": 0}, "k1")], runs, CODE, round_=1)
    assert len(found.reused) == 1 and len(found.train) == 1


def test_wanted_trials_key_every_grid_point_in_tunes_order():
    spec = load_spec(SMOKE, [])
    wanted = wanted_trials(spec)
    assert [p for p, _ in wanted][:2] == [
        {"model.d_model": 16, "train.seed": 0},
        {"model.d_model": 32, "train.seed": 0},
    ]
    assert len({key for _, key in wanted}) == 4


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["sweep.search=random"], "sweep.search: random"),
        (["space.optim.lr={loguniform: [1.0e-4, 1.0e-2]}"], "space.optim.lr"),
        (["sweep.pack=2"], "sweep.pack: 2"),
    ],
)
def test_extend_needs_a_grid_of_unpacked_trials(sets, field):
    with pytest.raises(SweepError, match=f"^{field}: --extend"):
        check_grid(load_spec(SMOKE, sets))


def test_code_note_says_when_trials_come_from_other_code():
    same = pd.DataFrame({"code": [CODE, CODE]})
    mixed = pd.DataFrame({"code": [CODE, "0.1.0+bbbbbbbbbbbb", CODE]})
    assert code_note(same) == "" and code_note(pd.DataFrame({"x": [1]})) == ""
    note = code_note(mixed)
    assert "2 versions of arith's code" in note and "--reuse-stale" in note


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--extend", "--overwrite"], "error: --overwrite and --extend: choose one"),
        (["--extend", "--resume"], "error: --resume and --extend: choose one"),
        (["--reuse-stale"], "error: --reuse-stale: only with --extend"),
    ],
)
def test_bad_combinations_are_one_line(tmp_path, flags, message):
    code, err = call_main([str(SMOKE), "--out", str(tmp_path), *flags])
    assert code == 2 and err.strip() == message


def test_extend_where_nothing_ran_is_one_line(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = [str(SMOKE), "--out", str(tmp_path), "--tracking-uri", uri, "--extend", "--dry-run"]
    code, err = call_main(argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: --extend: nothing ran in ") and "without --extend" in err
    assert not (tmp_path / "mlflow.db").exists()  # nothing started, no store made

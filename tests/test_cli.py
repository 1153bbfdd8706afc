"""The real commands as a user runs them: seed configs train, predict answers, bad input exits 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIGS = sorted((Path(__file__).parents[1] / "arith" / "configs").glob("*.yaml"))
SMALL = [
    "--set", "train.max_steps=4", "--set", "train.eval_every=2", "--set", "train.batch_size=16",
    "--set", "train.train_eval_size=16", "--set", "data.val_size=16", "--set", "data.test_size=16",
    "--set", "data.longer_size=16", "--set", "model.d_model=32", "--set", "model.n_layer=1",
    "--set", "model.d_ff=64",
]  # fmt: skip


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, input=stdin, timeout=300
    )


def test_there_is_a_config_for_every_seed():
    assert [p.name[:7] for p in CONFIGS] == [f"seed00{i}" for i in range(5)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_seed_config_trains_and_evaluates(config, tmp_path):
    result = run("-m", "arith.train", str(config), *SMALL, "--quiet", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["steps"] == 4 and 0.0 <= summary["test/exact_match"] <= 1.0
    assert (tmp_path / "checkpoint.pt").exists() and (tmp_path / "config.yaml").exists()
    if "seed000" in config.name:
        assert {"ood/exact_match", "ood/normalised_match"} <= set(summary)
    if "seed001" in config.name:
        assert {"longer/exact_match", "edge/exact_match"} <= set(summary)
    if "seed004" in config.name:
        assert {"test/exact_match/mul", "test/exact_match/floordiv"} <= set(summary)


def test_predict_completes_prompts_from_arguments_and_stdin(tmp_path):
    config = CONFIGS[0]
    assert (
        run("-m", "arith.train", str(config), *SMALL, "--quiet", "--out", str(tmp_path)).returncode
        == 0
    )
    result = run("-m", "arith.predict", str(tmp_path), "1234 + 5678 =", "1 + 2 =")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
    # answered, with a note: seed 000 trains on 4-digit operands only
    assert result.stderr.strip() == (
        "note: prompt '1 + 2 =': it trained on 4-digit operands only "
        "(task.operand_lengths: fixed); its answer may be wrong"
    )
    longer = run("-m", "arith.predict", str(tmp_path), "12345 + 1 =")
    assert longer.returncode == 0 and "longer than the 4 digits it trained on" in longer.stderr
    piped = run("-m", "arith.predict", str(tmp_path / "checkpoint.pt"), stdin="1234 + 5678 =\n")
    assert piped.returncode == 0 and len(piped.stdout.splitlines()) == 1
    bad = run("-m", "arith.predict", str(tmp_path), "12#4 + 1 =")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    for prompt in ("hello", "12 + 34", "12 * 34 ="):  # not a plain addition problem
        bad = run("-m", "arith.predict", str(tmp_path), "1 + 2 =", prompt)
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(lines) == 1 and prompt in lines[0], bad.stderr
        assert bad.stdout == ""  # every prompt is checked before any answer
    # a local model answers alike through sweeps.predict; an MLflow run only through it
    via_sweeps = run("-m", "sweeps.predict", str(tmp_path), "1234 + 5678 =", "1 + 2 =")
    assert via_sweeps.returncode == 0 and via_sweeps.stdout == result.stdout, via_sweeps.stderr
    run_id = "0123456789abcdef0123456789abcdef"
    for source in (f"runs:/{run_id}", run_id):
        refused = run("-m", "arith.predict", source, "1 + 2 =")
        assert refused.returncode == 2 and refused.stderr.strip() == (
            f"error: model: {source} is an MLflow run; python -m sweeps.predict {source} asks it"
        )
    missing = run("-m", "sweeps.predict", f"runs:/{run_id}", "--tracking-uri",
                  f"sqlite:///{tmp_path / 'none.db'}", "1 + 2 =")  # fmt: skip
    assert missing.returncode == 2 and "no MLflow store at" in missing.stderr, missing.stderr


def test_a_model_saved_before_packed_trials_still_answers(tmp_path):
    """Weights without the member axis (models logged by sweeps before packed trials) load as a
    pack of one and answer exactly as the same weights with it."""
    import torch

    config = CONFIGS[0]
    trained = run("-m", "arith.train", str(config), *SMALL, "--quiet", "--out", str(tmp_path))
    assert trained.returncode == 0, trained.stderr
    old = tmp_path / "old"
    old.mkdir()
    payload = torch.load(tmp_path / "model.pt", map_location="cpu", weights_only=True)
    payload["model"] = {k: v.squeeze(0) for k, v in payload["model"].items()}
    # and they saved the tied output head under its own name, as the same tensor as wte
    payload["model"]["lm_head.weight"] = payload["model"]["wte.weight"]
    torch.save(payload, old / "model.pt")
    prompts = ("1234 + 5678 =", "99 + 1 =")
    new_answers = run("-m", "arith.predict", str(tmp_path), *prompts)
    old_answers = run("-m", "arith.predict", str(old), *prompts)
    assert old_answers.returncode == 0, old_answers.stderr
    assert old_answers.stdout == new_answers.stdout and len(old_answers.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--set", "model.n_layr=2"], "model.n_layr"),
        (["--set", "model.n_layer=abc"], "model.n_layer"),
        (["--set", "model.n_layer=-1"], "model.n_layer"),
        (["--set", "format.name=base100", "--set", "model.position=abacus"], "model.position"),
        (["--set", "task.name=sorting", "--set", "format.name=carry_trace"], "format.name"),
        (["--set", "task.modulus=96", "--set", "task.name=modular"], "task.modulus"),
        (["--set", "optim.lr"], "--set"),
        (["no_such_file.yaml"], "no_such_file.yaml"),
    ],
)
def test_bad_configs_exit_2_with_one_line(args, names, tmp_path):
    result = run("-m", "arith.train", *args, "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0], result.stderr
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def test_train_progress_bar_shows_the_running_loss_and_never_nan(tmp_path):
    result = run("-m", "arith.train", str(CONFIGS[0]), *SMALL, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    frames = [f for f in result.stderr.replace("\r", "\n").splitlines() if "step" in f]
    assert frames and "nan" not in result.stderr, result.stderr
    assert any("loss=" in f for f in frames), result.stderr


COMMANDS = ["arith.train", "arith.predict", "arith.bench", "sweeps.run", "sweeps.table"]
COMMANDS += ["sweeps.submit", "sweeps.bench", "sweeps.findings", "sweeps.compare", "sweeps.predict"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_texts_have_no_restructuredtext_backticks(command):
    result = run("-m", command, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m " + command in result.stdout
    assert "`" not in result.stdout, result.stdout


def test_an_answer_may_run_as_long_as_the_prompt_needs(monkeypatch):
    """A model trained on 2-digit sums asked an 8-digit one: the answer's room follows the
    prompt (9 digits and EOS), not the trained format's longest sequence, so a
    length-generalising model is never cut at the trained length."""
    import torch

    from arith import config as config_lib
    from arith import predict
    from arith.model.gpt import GPT
    from arith.text.formats import build_format

    config = config_lib.load(None, ["task.n_digits=2", "model.position=rope", "model.d_model=16"])
    fmt = build_format(config.format, config.task)
    model = GPT(config.model, len(fmt.vocab), fmt.max_seq_len(), fmt.digit_ids)
    limits = []

    def decode(model, ids, limit, eos_id):
        limits.append(limit)
        return torch.zeros((1, 0), dtype=torch.long)

    monkeypatch.setattr(predict, "greedy_decode", decode)
    prompt = predict.problem_ids(fmt, "12345678 + 99999999 =")
    assert prompt.n_digits == 8 and prompt.why is not None
    predict.complete(model, fmt, prompt)
    assert limits[-1] >= fmt.max_seq_len(8) > fmt.max_seq_len()
    predict.complete(model, fmt, predict.problem_ids(fmt, "12 + 34 ="))
    assert limits[-1] == fmt.max_seq_len()


def test_a_second_ctrl_c_while_stopping_does_not_cut_the_exit_short(tmp_path):
    # The first press stops the command (exit 130, "interrupted"); a second one 0.2 s later, on
    # the way out, printed Python's "Exception ignored ... KeyboardInterrupt" traceback, and in
    # a chaos run of sweeps.run (seed 51777736, presses 0.3 s apart) ended it with -2 (SIGINT)
    script = tmp_path / "twice.py"
    script.write_text(
        "import os, signal, threading\n"
        "from arith.cli import run_main\n"
        "def main():\n"
        "    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "    raise KeyboardInterrupt\n"
        "run_main(main)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (130, "interrupted\n")

"""Training's periodic evaluations read exact match from one teacher-forced pass
(``evaluate_set(decode=False)``): on trained models it marks the same rows right as greedy
decoding, row by row, for answers of mixed lengths, fed first tokens and long traces."""

from __future__ import annotations

import pytest
import torch

from arith import config as config_lib
from arith.data.dataset import build_dataset
from arith.evaluation.evaluate import evaluate_set, exact_rows, forced_members
from arith.predict import load_model
from arith.training.trainer import build_model, train

SMALL = ["model.d_model=32", "model.n_layer=1", "train.batch_size=64", "optim.lr=3e-3"]
SETS = ["data.val_size=300", "data.test_size=300"]
CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "overrides",
    [
        # operands of 1 and 2 digits: prompts and answers of several lengths in one set
        ["task.n_digits=2", "format.name=reversed", "train.max_steps=800"],
        # the first answer token fed, not scored (seed 003's --mask_first_n)
        ["task.n_digits=2", "format.name=plain", "format.mask_first_n=1", "train.max_steps=800"],
        # carry traces and long division (longer answers) beside short sums in one set
        [
            "task.name=multi_op",
            "task.n_digits=1",
            "format.name=carry_trace",
            "format.division_trace=true",
            "train.max_steps=400",
        ],
    ],
    ids=["mixed_lengths", "mask_first_n", "traces"],
)
def test_forced_exact_match_is_greedy_decoding_s_row_by_row(tmp_path, overrides):
    torch.manual_seed(0)
    config = config_lib.load(None, [*SMALL, *SETS, *overrides, "train.eval_every=400"])
    train(config, checkpoint_dir=tmp_path)
    model, _ = load_model(tmp_path)
    data = config.data
    dataset = build_dataset(config.task, config.format, data, data.resolved_seed(config.train.seed))
    for name in ("val", "test"):
        problems = dataset.eval_sets[name]
        decoded = exact_rows(model, dataset.format, problems, CPU)
        _, forced = forced_members(model, dataset.format, problems, CPU)
        # a model that gets some rows right and some wrong, or the comparison says little
        assert 0.05 < decoded.mean() < 0.95, (name, decoded.mean())
        assert forced.shape == (1, len(problems))
        assert (forced[0] == decoded).all(), (name, int((forced[0] != decoded).sum()))
        periodic = evaluate_set(model, dataset.format, problems, CPU, decode=False)
        assert periodic["exact_match"] == pytest.approx(decoded.mean())
        assert "short_answers" not in periodic  # text metrics need the decoded text


def test_exact_match_without_decoding_needs_the_prompt_s_own_answer_format():
    config = config_lib.load(None, [*SMALL, "data.ood_spacing=true", "train.max_steps=1"])
    data = config.data
    dataset = build_dataset(config.task, config.format, data, data.resolved_seed(config.train.seed))
    model = build_model(config, dataset)
    with pytest.raises(ValueError, match="without decoding"):
        evaluate_set(
            model,
            dataset.format_of("ood"),
            dataset.eval_sets["ood"],
            CPU,
            dataset.format,
            decode=False,
        )

"""Runs of one split in a row share its dataset (arith/data/recent.py), and sharing it changes
no figure: a second run with the kept dataset reports what a run with a fresh one does."""

from __future__ import annotations

from arith import config as config_lib
from arith.data import recent
from arith.training.trainer import train

TINY = [
    "task.n_digits=2",
    "model.d_model=16",
    "model.n_layer=1",
    "model.n_head=2",
    "data.val_size=32",
    "data.test_size=32",
    "train.batch_size=16",
    "train.max_steps=6",
    "train.eval_every=3",
    "train.train_eval_size=16",
]


def _config(*sets: str):
    return config_lib.load(None, [*TINY, *sets])


def test_the_same_split_is_built_once_and_another_replaces_it():
    cfg = _config()
    first = recent.recent_dataset(cfg.task, cfg.format, cfg.data, 0)
    assert recent.recent_dataset(cfg.task, cfg.format, cfg.data, 0) is first
    other = recent.recent_dataset(cfg.task, cfg.format, cfg.data, 1)  # another data seed
    assert other is not first and len(recent._recent) == 1
    assert recent.recent_dataset(cfg.task, cfg.format, cfg.data, 0) is not first  # rebuilt


def test_a_run_with_the_kept_dataset_reports_what_a_fresh_one_does():
    cfg = _config("optim.lr=3e-3")
    recent._recent.clear()
    fresh = train(cfg)
    (kept,) = recent._recent.values()
    train(_config("optim.lr=1e-3"))  # another run of the same split in between
    again = train(cfg)
    assert list(recent._recent.values()) == [kept]  # both ran on the kept dataset
    recent._recent.clear()
    rebuilt = train(cfg)
    (rebuilt_dataset,) = recent._recent.values()
    assert rebuilt_dataset is not kept
    for key in (
        "val/exact_match",
        "test/exact_match",
        "train/loss",
        "val/loss",
        "edge/exact_match",
    ):
        assert fresh[key] == again[key] == rebuilt[key], key

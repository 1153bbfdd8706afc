"""Hyperparameter sweeps over arith runs: Ray Tune search, MLflow tracking, scaling tables."""

"""arith: problems, formats, the shared decoder, its trainer and evaluation.

One training run, torch only: this package imports neither Ray nor MLflow.
"""

__all__: list[str] = []

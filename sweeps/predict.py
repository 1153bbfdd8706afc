"""``python -m sweeps.predict runs:/<run_id> "12 + 34 ="``: ask a sweep trial's model.

Fetches the trial's ``model/`` artifact from its MLflow store into a temporary folder and answers
as ``python -m arith.predict`` does on its ``model.pt`` and ``config.yaml``: arith reads local
files only and never imports MLflow, so the fetch lives here. The artifact is an MLflow model
(``sweeps.tracking.model_flavor``) or, for runs logged before, the two files alone. MODEL may
also be a bare run id, or a local run folder or checkpoint file, which goes to arith.predict
unchanged.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from arith import predict as arith_predict
from arith.cli import HelpFormatter, fail, one_line, run_main
from sweeps.analysis.store import default_tracking_uri, sqlite_file


def download_model(source: str, tracking_uri: str | None, into: Path) -> Path:
    """The folder of ``model.pt`` in the ``model/`` artifact of the MLflow run ``source`` names,
    downloaded under ``into``."""
    import mlflow.artifacts  # here, not at the top: a local MODEL never needs MLflow

    from sweeps.tracking.model_flavor import checkpoint_folder

    run_id = source.removeprefix("runs:/").strip("/").split("/")[0]
    uri = tracking_uri or default_tracking_uri()
    database = sqlite_file(uri)
    if database is not None and not database.is_file():
        fail(f"--tracking-uri: no MLflow store at {database}")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    try:
        local = mlflow.artifacts.download_artifacts(
            artifact_uri=f"runs:/{run_id}/model", tracking_uri=uri, dst_path=str(into)
        )
    except Exception as err:  # unknown run, no model artifact, unreachable store
        reason = one_line(err, 200)
        fail(f"model: cannot load the model of MLflow run {run_id} at {uri} ({reason})")
    return checkpoint_folder(local)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m sweeps.predict",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument(
        "model", help="runs:/<run_id>, an MLflow run id, a run folder or a checkpoint file"
    )
    parser.add_argument("prompts", nargs="*", help="prompts; read from stdin when none are given")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument(
        "--tracking-uri",
        help="MLflow store of the run (default $MLFLOW_TRACKING_URI or ./mlflow.db)",
    )
    args = parser.parse_intermixed_args(argv)  # options may follow the prompts
    limit = [] if args.max_new_tokens is None else ["--max-new-tokens", str(args.max_new_tokens)]
    if not arith_predict.names_a_run(args.model):
        return arith_predict.main([args.model, *args.prompts, *limit])
    with tempfile.TemporaryDirectory(prefix="sweeps-predict-") as tmp:
        local = download_model(args.model, args.tracking_uri, Path(tmp))
        return arith_predict.main([str(local), *args.prompts, *limit])


if __name__ == "__main__":
    run_main(main)

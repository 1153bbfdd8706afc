"""A trial's model as an MLflow model (``sweeps.tracking.model_flavor``): it loads with
``mlflow.pyfunc.load_model("runs:/<id>/model")``, also where the project is not installed,
``mlflow models serve`` serves it there, ``sweeps.run --register`` registers the best trial's,
and models saved before (their class pickled by name) and runs logged before that
(``model/model.pt`` alone) still answer where the project is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
import urllib.request
import venv
from importlib.metadata import entry_points
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from sweep_procs import SMOKE, free_port, fresh_store, stop_mlflow_server

from sweeps.tracking.model_flavor import ArithModel, requirements, save_pyfunc
from sweeps.tracking.registry import RegisterError, name_error, register_best
from sweeps.tracking.state import TrialState
from sweeps.tracking.writer import MLflowWriter

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "arith" / "configs" / "seed000_addition_k4.yaml"
TINY = [
    "train.max_steps=4", "train.eval_every=2", "train.batch_size=16", "train.train_eval_size=16",
    "data.val_size=16", "data.test_size=16", "data.longer_size=16", "model.d_model=32",
    "model.n_layer=1", "model.d_ff=64", "task.n_digits=3",
]  # fmt: skip
PROMPTS = ["123 + 456 =", "1 + 2 ="]


def run(*args: str) -> subprocess.CompletedProcess:
    """A command as a user runs it (each names its store with --tracking-uri)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A tiny model trained for real, logged as a trial's model by the sweep's writer (the
    record the tracker sends), and the same folder logged the way runs were before."""
    tmp = tmp_path_factory.mktemp("flavor")
    sets = [f"--set={s}" for s in TINY]
    trained = run("-m", "arith.train", str(CONFIG), *sets, "--quiet", "--out", str(tmp / "run"))
    assert trained.returncode == 0, trained.stderr
    folder = tmp / "exported"
    folder.mkdir()
    for name in ("model.pt", "config.yaml"):  # what export_model leaves for the writer
        (folder / name).write_bytes((tmp / "run" / name).read_bytes())
    uri = fresh_store(tmp / "mlflow.db")
    writer = MLflowWriter(uri, "flavor", resolve=None)
    writer.create_parent({})
    writer.trials["t_0"] = TrialState()
    writer.apply({"op": "child", "trial": "t_0"})
    writer.apply({"op": "model", "trial": "t_0", "folder": str(folder)})
    old = writer.client.create_run(writer.experiment()).info.run_id
    writer.client.log_artifacts(old, str(folder), "model")  # the layout before MLflow models
    pickled = writer.client.create_run(writer.experiment()).info.run_id
    writer.client.log_artifacts(pickled, str(_pickled_model(folder, tmp / "pickled")), "model")
    return {"uri": uri, "run_id": writer.trials["t_0"].run_id, "old": old, "pickled": pickled,
            "tmp": tmp}  # fmt: skip


def _pickled_model(folder: Path, into: Path) -> Path:
    """``folder`` as models were saved before they carried their code: the pyfunc's class
    pickled by its name, ``sweeps.tracking.model_flavor.ArithModel``."""
    (into / "checkpoint").mkdir(parents=True)
    for name in ("model.pt", "config.yaml"):
        (into / "checkpoint" / name).write_bytes((folder / name).read_bytes())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ArithModel, "__module__", "sweeps.tracking.model_flavor")
        mlflow.pyfunc.save_model(
            into / "model",
            python_model=ArithModel(),
            artifacts={"checkpoint": str(into / "checkpoint")},
            pip_requirements=requirements(),
        )
    assert b"sweeps.tracking.model_flavor" in (into / "model" / "python_model.pkl").read_bytes()
    return into / "model"


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> dict:
    """A virtual environment with this one's packages (MLflow, torch, ...) and their commands
    (``mlflow``, ``uvicorn``), as ``pip install mlflow torch`` leaves one, but not this project:
    its site-packages names this one's in a .pth file, and the project's editable install,
    itself a .pth file there, is not read (Python reads .pth files in site-packages folders
    only). ``python``, ``env`` (no PYTHONPATH, its commands first on PATH) and ``cwd`` (outside
    the repository) to run things there."""
    root = tmp_path_factory.mktemp("bare")
    venv.create(root / "venv", with_pip=False, symlinks=True)
    bin_dir = root / "venv" / "bin"
    (site,) = (root / "venv").glob("lib/python*/site-packages")
    (site / "this_venvs_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for name in ("mlflow", "uvicorn"):
        module, func = next(iter(entry_points(group="console_scripts", name=name))).value.split(":")
        script = f"#!{bin_dir / 'python'}\nimport sys\nfrom {module} import {func}\n"
        (bin_dir / name).write_text(script + f"sys.exit({func}())\n")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    bare = {"python": str(bin_dir / "python"), "env": env, "cwd": root}
    for package in ("arith", "sweeps"):
        found = subprocess.run([bare["python"], "-c", f"import {package}"], cwd=root, env=env,
                               capture_output=True, text=True)  # fmt: skip
        assert f"No module named '{package}'" in found.stderr, found
    return bare


def test_a_logged_trial_model_loads_and_answers_with_pyfunc(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    model = mlflow.pyfunc.load_model(f"runs:/{store['run_id']}/model")
    answers = model.predict(PROMPTS)
    assert len(answers) == 2 and all(isinstance(a, str) for a in answers)
    # as sweeps.predict answers the same run
    asked = run("-m", "sweeps.predict", f"runs:/{store['run_id']}", *PROMPTS,
                "--tracking-uri", store["uri"])  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.splitlines() == list(answers)
    schema = model.metadata.get_input_schema()
    assert [c.type.name for c in schema.inputs] == ["string"]
    assert model.metadata.metadata == {"task": "addition", "format": "plain"}
    with pytest.raises(mlflow.exceptions.MlflowException, match="'hello'"):
        model.predict(["hello"])


def test_a_trial_model_loads_and_answers_where_the_project_is_not_installed(store, bare):
    """As a user who installed MLflow and torch, not this project: the model carries its code
    (before, loading it failed with "No module named 'sweeps'")."""
    script = f"""
import json, sys
import mlflow.pyfunc
model = mlflow.pyfunc.load_model("runs:/{store["run_id"]}/model")
answers = model.predict({PROMPTS!r})
import arith
sweeps = [name for name in sys.modules if name.split(".")[0] == "sweeps"]
print(json.dumps({{"answers": answers, "arith": arith.__file__, "sweeps": sweeps}}))
"""
    env = {**bare["env"], "MLFLOW_TRACKING_URI": store["uri"]}
    done = subprocess.run([bare["python"], "-c", script], cwd=bare["cwd"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    there = json.loads(done.stdout.splitlines()[-1])
    assert there["sweeps"] == [] and "arith.zip" in there["arith"], there
    assert there["answers"] == _load(store, store["run_id"]).predict(PROMPTS)


def _load(store, run_id: str):
    """The pyfunc model of run ``run_id``, loaded here."""
    uri = f"runs:/{run_id}/model"
    return mlflow.pyfunc.load_model(
        mlflow.artifacts.download_artifacts(uri, tracking_uri=store["uri"])
    )


def test_a_model_saved_before_with_its_class_pickled_still_answers_where_the_project_is(store):
    answers = _load(store, store["pickled"]).predict(PROMPTS)
    assert answers == _load(store, store["run_id"]).predict(PROMPTS)
    asked = run("-m", "sweeps.predict", f"runs:/{store['pickled']}", *PROMPTS,
                "--tracking-uri", store["uri"])  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.splitlines() == answers


def test_the_logged_model_holds_its_checkpoint_example_and_pinned_requirements(store):
    client = MlflowClient(store["uri"])
    run_id = store["run_id"]
    held = {a.path for a in client.list_artifacts(run_id, "model")}
    assert {"model/MLmodel", "model/requirements.txt", "model/input_example.json"} <= held
    # its code, nothing pickled (a pickle names the module of its class)
    assert {"model/arith_model.py", "model/code"} <= held and "model/python_model.pkl" not in held
    code = {a.path for a in client.list_artifacts(run_id, "model/code")}
    assert code == {"model/code/arith.zip"}
    checkpoint = {a.path for a in client.list_artifacts(run_id, "model/artifacts/checkpoint")}
    assert checkpoint == {f"model/artifacts/checkpoint/{n}" for n in ("model.pt", "config.yaml")}
    local = Path(client.download_artifacts(run_id, "model", dst_path=str(store["tmp"] / "dl")))
    pins = (local / "requirements.txt").read_text().split()
    assert {p.split("==")[0].lower() for p in pins} == {"mlflow", "torch", "numpy", "pyyaml"}
    assert all("==" in p for p in pins)
    # the example is a prompt of the model's own task and width
    assert json.loads((local / "input_example.json").read_text()) == ["123 + 456 ="]


def test_saving_does_not_load_the_model_or_infer_requirements(store, monkeypatch, tmp_path):
    """Logging stays fast: nothing is inferred (no requirements, no model loaded to predict:
    saving runs the model's code, whose ArithModel is a class of its own, and its load_context
    and predict call arith.predict's load_model and complete)."""
    import mlflow.models

    import arith.predict

    def refuse(*args, **kwargs):
        raise AssertionError("inferred while saving")

    monkeypatch.setattr(mlflow.models, "infer_pip_requirements", refuse)
    monkeypatch.setattr(ArithModel, "load_context", refuse)
    monkeypatch.setattr(ArithModel, "predict", refuse)
    monkeypatch.setattr(arith.predict, "load_model", refuse)
    monkeypatch.setattr(arith.predict, "complete", refuse)
    save_pyfunc(store["tmp"] / "exported", tmp_path / "model")
    assert (tmp_path / "model" / "artifacts" / "checkpoint" / "model.pt").is_file()


def test_sweeps_predict_still_answers_a_run_logged_before(store):
    old = run("-m", "sweeps.predict", f"runs:/{store['old']}", *PROMPTS,
              "--tracking-uri", store["uri"])  # fmt: skip
    new = run("-m", "sweeps.predict", store["run_id"], *PROMPTS, "--tracking-uri", store["uri"])
    assert old.returncode == 0, old.stderr
    assert len(old.stdout.splitlines()) == 2 and old.stdout == new.stdout


@pytest.mark.slow
def test_mlflow_models_serve_answers_on_127_0_0_1_where_the_project_is_not_installed(
    store, bare, tmp_path
):
    port = free_port()
    mlflow_bin = Path(bare["python"]).with_name("mlflow")
    args = [str(mlflow_bin), "models", "serve", "-m", f"runs:/{store['run_id']}/model"]
    args += ["--env-manager", "local", "-p", str(port), "-h", "127.0.0.1"]
    env = {**bare["env"], "MLFLOW_TRACKING_URI": store["uri"]}
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 -- the server outlives this line
    server = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(f"{base}/ping"):
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "no /ping answer within 120 s"
            time.sleep(0.5)
        body = json.dumps({"inputs": PROMPTS}).encode()
        request = urllib.request.Request(
            f"{base}/invocations", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            predictions = json.loads(response.read())["predictions"]
        assert len(predictions) == 2 and all(isinstance(p, str) for p in predictions)
    finally:
        stop_mlflow_server(server)  # its own process group: the CLI and uvicorn
        log.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.parametrize("name", ["", "  ", "a/b", "a:b", "..", "./a", "a/../b"])
def test_a_bad_register_name_is_refused_with_the_flag_and_the_name(name):
    error = name_error(name)
    assert error is not None and error.startswith("--register")
    assert repr(name) in error or not name.strip()


@pytest.mark.parametrize("name", ["arith-best", "team.models.adder_v2", "My Model", ".hidden"])
def test_good_register_names_pass(name):
    assert name_error(name) is None


def test_a_bad_register_name_is_one_line_and_exit_2_before_anything_starts(tmp_path):
    out, db = tmp_path / "out", tmp_path / "mlflow.db"
    result = run("-m", "sweeps.run", str(SMOKE), "--out", str(out), "--tracking-uri",
                 f"sqlite:///{db}", "--register", "team/best")  # fmt: skip
    assert result.returncode == 2 and result.stderr == (
        "error: --register: a registered model's name cannot hold '/' or ':', but got 'team/best'\n"
    )
    assert not out.exists() and not db.exists()


def test_register_best_takes_the_parents_best_run_and_only_an_mlflow_model(store):
    client = MlflowClient(store["uri"])
    experiment = client.get_experiment_by_name("flavor").experiment_id

    def parent(**tags: str) -> str:
        return client.create_run(experiment, tags=tags).info.run_id

    version = register_best(store["uri"], parent(**{"sweep.best_run_id": store["run_id"]}), "m")
    assert (version.name, version.version, version.run_id) == ("m", 1, store["run_id"])
    assert version.source.endswith(f"{store['run_id']}/artifacts/model")
    with pytest.raises(RegisterError, match="is no MLflow model"):  # logged before
        register_best(store["uri"], parent(**{"sweep.best_run_id": store["old"]}), "m")
    with pytest.raises(RegisterError, match="no best trial"):
        register_best(store["uri"], parent(), "m")
    assert [int(v.version) for v in client.search_model_versions("name = 'm'")] == [1]


@pytest.mark.slow
def test_register_makes_the_best_trial_a_model_version(tmp_path, monkeypatch):
    uri = fresh_store(tmp_path / "mlflow.db")
    args = ["-m", "sweeps.run", str(SMOKE), "--out", str(tmp_path / "out"), "--tracking-uri", uri]
    args += ["--set=space.model.d_model=[16]", "--set=space.train.seed=[0]"]
    args += ["--set=base.train.max_steps=10", "--register", "arith-best"]
    for round_, again in ((1, []), (2, ["--overwrite"])):  # a second sweep: version 2
        result = run(*args, *again)
        assert result.returncode == 0, result.stderr[-3000:]
        assert (
            f"registered:     arith-best version {round_} (models:/arith-best/{round_}), the best "
            "trial's model"
        ) in result.stdout.splitlines()
    client = MlflowClient(uri)
    versions = client.search_model_versions("name = 'arith-best'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    parents = [
        r for r in client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
        if r.data.tags.get("sweep.role") == "parent"
    ]  # fmt: skip
    assert {v.run_id for v in versions} == {p.data.tags["sweep.best_run_id"] for p in parents}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model("models:/arith-best/2")
    assert len(model.predict(["12 + 34 ="])) == 1

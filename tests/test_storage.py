"""What a sweep deletes in Tune's storage, found through the storage's own filesystem: the
checkpoints a finished sweep prunes, and the experiments --overwrite removes (only those its
``sweep.json`` names). A bucket cannot be had here; pyarrow's local filesystem under a
``SubTreeFileSystem`` stands in, which names paths as S3 does (``bucket/prefix/...``, no
leading slash), and ``file://`` URIs go through pyarrow as ``s3://`` ones do."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow.fs

from sweeps.cluster import storage as storage_fs
from sweeps.runtime.earlier import remove_earlier
from sweeps.runtime.outputs import prune_checkpoints
from sweeps.spec.sweep_spec import load_spec

SMOKE = Path(__file__).resolve().parents[1] / "search_spaces" / "smoke.yaml"


def _trial(root: Path, trial: str, n: int) -> None:
    for k in range(n):
        folder = root / "bucket" / "exp" / trial / f"checkpoint_{k:06d}"
        folder.mkdir(parents=True)
        (folder / "model.pt").write_bytes(b"x" * 100)


def test_checkpoints_are_pruned_through_the_storages_filesystem(tmp_path, monkeypatch):
    """A bucket's paths (``bucket/exp/...``) are never read as paths of the working folder,
    where a folder of the same name must survive."""
    store = tmp_path / "store"
    _trial(store, "t0", 3)
    _trial(store, "t1", 2)
    decoy = tmp_path / "cwd"
    _trial(decoy, "t0", 3)
    monkeypatch.chdir(decoy)
    bucket = pyarrow.fs.SubTreeFileSystem(str(store), pyarrow.fs.LocalFileSystem())

    def result(trial: str, last: int, error=None):
        checkpoint = SimpleNamespace(path=f"bucket/exp/{trial}/checkpoint_{last:06d}")
        path = f"bucket/exp/{trial}"
        return SimpleNamespace(path=path, filesystem=bucket, checkpoint=checkpoint, error=error)

    freed = prune_checkpoints([result("t0", 2), result("t1", 1, error=RuntimeError("x"))])
    assert freed == 200
    assert sorted(p.name for p in (store / "bucket/exp/t0").iterdir()) == ["checkpoint_000002"]
    assert len(list((store / "bucket/exp/t1").iterdir())) == 2  # errored: kept for --resume
    assert len(list((decoy / "bucket/exp/t0").iterdir())) == 3  # the working folder's: untouched


def test_storage_helpers_take_file_uris_and_paths_alike(tmp_path):
    folder = tmp_path / "exp" / "trial"
    folder.mkdir(parents=True)
    uri = f"file://{tmp_path}/exp"
    assert storage_fs.subfolders(uri) == [f"{uri}/trial"]
    assert storage_fs.subfolders(str(tmp_path / "exp")) == [str(folder)]
    assert storage_fs.delete_dir(f"{uri}/trial") and not folder.exists()
    assert not storage_fs.delete_dir(f"{uri}/trial")  # gone: nothing to delete


def test_overwrite_deletes_only_the_experiments_the_sweep_named(tmp_path):
    """The sweep ran (and was extended) with storage A; --overwrite now names storage B, where
    another sweep, named like an --extend round of this one, keeps its experiment."""
    spec = load_spec(SMOKE, [])
    a, b = tmp_path / "a", tmp_path / "b"
    ours = [a / "smoke", a / "smoke-extend1"]
    theirs = b / "smoke-extend1"
    for folder in [*ours, theirs]:
        folder.mkdir(parents=True)
        (folder / "experiment_state.json").write_text("{}")
    out = tmp_path / "out" / "smoke"
    out.mkdir(parents=True)
    state = {"sweep": "smoke", "extend_round": 1, "experiments": [f"file://{d}" for d in ours]}
    (out / "sweep.json").write_text(json.dumps(state))
    remove_earlier(spec, out, str(b))
    assert not out.exists() and not any(d.exists() for d in ours)
    assert (theirs / "experiment_state.json").is_file()

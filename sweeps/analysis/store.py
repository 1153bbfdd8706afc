"""Where a sweep keeps what outlives its driver: the MLflow store it logs to (the default
tracking URI, the database file of a SQLite one), its folder's ``sweep.json`` and files that
must be written whole.

One helper for each, in the lowest package that needs it (``sweeps.analysis.collect`` opens
the store; tracking, the runtime and the commands use them too).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

SQLITE = "sqlite:///"
# In a sweep's output folder: its name, MLflow parent run and store (sweeps.runtime.state).
STATE_FILE = "sweep.json"

# A child run an ``--extend`` left out of its sweep (sweeps.runtime.extend): a trial of a grid
# value the spec no longer has, or one that did not finish and was trained again. The run stays
# in MLflow; the tag's value says why it is out of the tables.
LEFT_OUT_TAG = "sweep.left_out"


def default_tracking_uri(cwd: Path | None = None) -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite store ``mlflow.db`` in ``cwd`` (the working folder)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"{SQLITE}{(cwd or Path.cwd()).resolve() / 'mlflow.db'}"


def is_sqlite(uri: str) -> bool:
    return uri.startswith(SQLITE)


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, its query (``?timeout=...``) left out; None
    for any other URI and for an in-memory database."""
    if not is_sqlite(uri):
        return None
    path = uri.removeprefix(SQLITE).split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def write_atomic(path: Path, data: str | bytes) -> None:
    """``data`` as ``path`` in one rename: a kill leaves the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp")  # a dot: never matched by Tune's file patterns
    tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(tmp, path)


def write_figure(path: Path, figure, **savefig: Any) -> None:
    """A matplotlib ``figure`` as a PNG ``path`` in one rename (``savefig``: its options)."""
    png = io.BytesIO()
    figure.savefig(png, format="png", **savefig)
    write_atomic(path, png.getvalue())


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under ``folder``."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def masked(uri: str) -> str:
    """``uri`` as it may be printed: a password in it (``http://user:secret@host``) shown as
    ``***``; anything else unchanged."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = f"{parts.username}:***@{parts.netloc.rsplit('@', 1)[1]}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def has_credentials(uri: str) -> bool:
    return masked(uri) != uri


def read_state(folder: Path) -> dict:
    """A sweep folder's ``sweep.json``: its name, MLflow parent run (``parent_run_id``) and
    store (``tracking_uri``); {} without one (a folder copied without it, or none yet)."""
    import json

    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}

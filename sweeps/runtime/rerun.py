"""The command that continues a stopped sweep (``--resume``), as a user can paste it: the spec
the sweep saved, and every option of the run that a resume needs to find what it left
(``--out``, ``--tracking-uri``, ``--address``, ``--storage``, ``--storage-shared``). A password
in the tracking URI is never printed: the command names the environment variable that holds
it (``$MLFLOW_TRACKING_URI``, or ``$MLFLOW_TRACKING_PASSWORD`` inside the URI)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from urllib.parse import urlsplit

from sweeps.analysis.store import has_credentials

PASSWORD_ENV = "MLFLOW_TRACKING_PASSWORD"


def resume_command(
    out_dir: Path,
    tracking_uri: str,
    *,
    address: str | None = None,
    storage: str | None = None,
    storage_shared: bool = False,
) -> list[str]:
    """The lines that continue the sweep in ``out_dir``: the command, after a line that says
    which password to export first where the URI's password is in no environment variable."""
    words = ["python", "-m", "sweeps.run", str(out_dir / "spec.yaml"), "--out", str(out_dir.parent)]
    command = shlex.join(words)
    uri, export = _tracking_uri_argument(tracking_uri)
    command += f" --tracking-uri {uri}"
    if address:
        command += f" --address {shlex.quote(address)}"
    if storage:
        command += f" --storage {shlex.quote(storage)}"
    if storage_shared:
        command += " --storage-shared"
    command += " --resume"
    return [export, command] if export else [command]


def _tracking_uri_argument(uri: str) -> tuple[str, str | None]:
    """(``--tracking-uri``'s argument as the shell should read it, the export line to run
    first or None): the URI quoted; with a password, the variable holding it instead."""
    if not has_credentials(uri):
        return shlex.quote(uri), None
    if os.environ.get("MLFLOW_TRACKING_URI") == uri:
        return '"$MLFLOW_TRACKING_URI"', None
    parts = urlsplit(uri)
    head, tail = uri.split(f":{parts.password}@", 1)
    argument = f'"{_in_double_quotes(head)}:${{{PASSWORD_ENV}}}@{_in_double_quotes(tail)}"'
    if os.environ.get(PASSWORD_ENV) == parts.password:
        return argument, None
    return argument, f"export {PASSWORD_ENV}='...'  # the password the sweep's --tracking-uri held"


def _in_double_quotes(text: str) -> str:
    """``text`` as the shell reads it back between double quotes."""
    for special in ("\\", '"', "$", "`"):
        text = text.replace(special, f"\\{special}")
    return text

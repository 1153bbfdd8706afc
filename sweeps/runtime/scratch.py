"""A trial's working folder: where ``arith`` writes its checkpoint before Tune copies it, on the
local disk of the node the trial runs on.

Not in the trial's own folder (``tune.get_context().get_trial_dir()``): Tune syncs that folder
to the storage at every snapshot of the experiment, so a checkpoint being written there was
copied half-written, and a trial that removed it while Tune copied failed Tune's syncer (a
FileNotFoundError seen in a resume). Here it is the worker's alone: removed when its trial
ends, and named after the worker's process, so that the folders of workers that were killed
(``kill -9``, a lost node's restart) are pruned by the next trial that starts on the node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

ROOT_NAME = "arith-sweeps-work"
TRIAL_SCRATCH, PACK_SCRATCH = "arith-trial-", "arith-pack-"
"""The prefixes of a trial's and a pack trial's working folder."""


def scratch_root() -> Path:
    """The folder of this node's working folders, under the system's temporary folder."""
    return Path(tempfile.gettempdir()) / ROOT_NAME


def working_folder(prefix: str) -> tempfile.TemporaryDirectory:
    """A new working folder for this worker (``prefix``: TRIAL_SCRATCH or PACK_SCRATCH), after
    pruning those that workers which died left (``prune_dead``)."""
    root = scratch_root()
    root.mkdir(parents=True, exist_ok=True)
    prune_dead(root)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=root)


def owner_pid(folder: Path) -> int | None:
    """The pid of the worker that made a working folder, from its name; None if not one."""
    for prefix in (TRIAL_SCRATCH, PACK_SCRATCH):
        if folder.name.startswith(prefix):
            pid = folder.name[len(prefix) :].split("-", 1)[0]
            return int(pid) if pid.isdigit() else None
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def prune_dead(root: Path) -> list[Path]:
    """Remove the working folders in ``root`` whose worker is no longer alive; those removed."""
    removed = []
    for folder in root.iterdir() if root.is_dir() else []:
        pid = owner_pid(folder)
        if pid is not None and not alive(pid):
            with contextlib.suppress(OSError):
                shutil.rmtree(folder)
                removed.append(folder)
    return removed

"""The one module that reaches into Ray's insides, and the Ray versions it was tested on.

Everything else in ``sweeps`` uses Ray's public API and settings (actors reused with lost trials
restored, every trial made up front, every checkpoint kept: ``sweeps.runtime.tuning``). Three
things have no public counterpart, and they live here:

- ``finish_sync``: Tune writes its experiment snapshot in a staging folder of the driver (under
  Ray's session folder, ``session_*/artifacts/<time>/<experiment>/driver_artifacts``: the layout
  of ``StorageContext.experiment_driver_staging_path``) and then copies it into the experiment
  folder, file by file and not atomically. A driver killed during that copy leaves a snapshot
  cut short, which ``Tuner.restore`` cannot read; the staging folder outlives the kill and holds
  the complete one.

- ``forget_decisions_in_flight``: Tune's experiment snapshot keeps the decisions its controller
  holds back until a trial's save returns (``runner_data``: ``_cached_trial_decisions``,
  ``_queued_trial_decisions``). A worker that dies while Tune saves its checkpoint leaves STOP
  there for good; ``Tuner.restore(resume_errored=True)`` restarts the trial and then acts on
  that STOP at its first save, so the trial ends after one report without its summary. A new
  driver has no save in flight: it starts with none of them.

- ``reread_ray_config``: Ray reads its settings from the environment once, when imported; a
  token-authentication mode set later (``sweeps.cluster.auth``) takes effect only when its
  config reads them again (``ray._raylet.Config.initialize``).

- ``autoscaler_node_types``: the node types a cluster's autoscaler reported to Ray (its
  ``ClusterConfig`` in the GCS: each group's resources and largest count), the only record of
  GPUs a cluster can add but has not yet; Ray Data's autoscaler reads them the same way
  (``ray._private.state.state.get_cluster_config``).

Tune changes such details between minor releases, so a sweep starts only on a Ray inside
``RAY_RANGE`` (both ends are tested in CI, each in its own virtual environment; pyproject.toml
and docs/clusters.md state the same range): ``require_supported_ray`` is one line otherwise.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path

from sweeps.analysis.store import write_atomic
from sweeps.cluster.errors import UnsupportedRay

# The Ray versions this project supports: pyproject.toml and docs/clusters.md say the same
# (tests/test_ray_versions.py checks), and CI runs the fault tests on both ends.
# The floor: Ray before 2.55 deleted a submitted job's working dir under its driver when the
# driver connected (the job's own code then failed to import; docs/clusters.md, Ray versions).
RAY_RANGE = ">=2.55,<2.61"
RAY_TESTED = ("2.55", "2.60")
# What this module relies on (see its docstring): (module, class, attribute), checked at import.
_NEEDED = [
    ("ray.train._internal.storage", "StorageContext", "experiment_driver_staging_path"),
    ("ray._raylet", "Config", "initialize"),
]


def autoscaler_node_types() -> list[tuple[float, float, int]] | None:
    """(CPUs, GPUs, most nodes) of each node type the cluster's autoscaler can start, as it
    reported them to Ray; None where it reported none (no autoscaler, or an older one) or this
    Ray cannot say. A group without a limit counts as 64 nodes."""
    try:
        from ray._private.state import state

        config = state.get_cluster_config()
    except Exception:  # no such call in this Ray, or the GCS did not answer: the nodes up
        return None
    if config is None or not config.node_group_configs:
        return None
    kinds = []
    for group in config.node_group_configs:
        resources = dict(group.resources)
        most = group.max_count if group.max_count >= 0 else 64
        kinds.append((float(resources.get("CPU", 0)), float(resources.get("GPU", 0)), most))
    return kinds


def reread_ray_config() -> None:
    """Make an imported Ray read its settings (``RAY_AUTH_MODE``, ...) from the environment
    again; nothing if Ray was not imported yet (it will read them then)."""
    if "ray" not in sys.modules:
        return
    from ray._raylet import Config

    Config.initialize("")


def unsupported_ray(version: str | None = None) -> str | None:
    """Why the installed Ray (or ``version``) cannot run a sweep, in one line; None if it can."""
    import ray
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    version = version or ray.__version__
    try:
        supported = Version(version) in SpecifierSet(RAY_RANGE)
    except InvalidVersion:
        supported = False
    if not supported:
        return (
            f"ray {version} is installed, but arith-sweeps supports ray{RAY_RANGE} (tested: "
            f"{' and '.join(RAY_TESTED)}); install one with pip install "
            f"'ray[default,tune]{RAY_RANGE}' (on a cluster: see docs/clusters.md, Ray versions)"
        )
    for module, owner, attribute in _NEEDED:
        try:
            found = hasattr(getattr(importlib.import_module(module), owner), attribute)
        except (ImportError, AttributeError):
            found = False
        if not found:
            return (
                f"ray {version}: {module}.{owner}.{attribute} is missing, which "
                "sweeps.cluster.tunefix needs; arith-sweeps was tested with ray "
                f"{' and '.join(RAY_TESTED)}"
            )
    return None


def require_supported_ray() -> None:
    """Raise UnsupportedRay (one line) unless the installed Ray is one a sweep may run on."""
    problem = unsupported_ray()
    if problem:
        raise UnsupportedRay(problem)


# At import, as the docstring says: a process that imports this module learns it at once.
UNSUPPORTED = unsupported_ray()


def finish_sync(experiment_dir: Path) -> bool:
    """Copy the driver's staged snapshot into ``experiment_dir`` again where the copy there
    differs (cut short or older) and the staged one is complete; True if it did. Local
    storage only. See the module docstring for why."""
    snapshot = newest_snapshot(experiment_dir)
    if snapshot is None:
        return False
    staged = staged_copies(experiment_dir, snapshot.name)
    if not staged:
        return False
    staging = staged[-1].parent
    try:
        json.loads(staged[-1].read_text(encoding="utf-8"))
    except ValueError:  # killed while Tune wrote it: the experiment folder's copy is older
        return False
    differs = [
        f
        for f in staging.iterdir()
        if f.is_file()
        and (
            not (experiment_dir / f.name).is_file()
            or (experiment_dir / f.name).read_bytes() != f.read_bytes()
        )
    ]
    for f in differs:
        write_atomic(experiment_dir / f.name, f.read_bytes())
    return bool(differs)


# The controller's held-back decisions in a snapshot's runner_data (forget_decisions_in_flight).
_DECISIONS_IN_FLIGHT = ("_cached_trial_decisions", "_queued_trial_decisions")


def forget_decisions_in_flight(experiment_dir: Path) -> bool:
    """Empty the held-back decisions of the snapshot Tune restores from (see the module
    docstring); True if there were any. Local storage only."""
    snapshot = newest_snapshot(experiment_dir)
    if snapshot is None:
        return False
    try:
        state = json.loads(snapshot.read_text(encoding="utf-8"))
    except ValueError:  # cut short: Tune cannot restore it either, and says so
        return False
    runner = state.get("runner_data")
    if not isinstance(runner, dict) or not any(runner.get(k) for k in _DECISIONS_IN_FLIGHT):
        return False
    for key in _DECISIONS_IN_FLIGHT:
        if key in runner:
            runner[key] = {}
    write_atomic(snapshot, json.dumps(state))
    return True


def newest_snapshot(experiment_dir: Path) -> Path | None:
    """The snapshot Tune restores from: the newest by name (names carry the start time)."""
    found = sorted(experiment_dir.glob("experiment_state-*.json"))
    return found[-1] if found else None


def staged_copies(experiment_dir: Path, name: str) -> list[Path]:
    """The copies of snapshot file ``name`` in the drivers' staging folders under Ray's session
    folders, oldest first."""
    ray_tmp = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir())) / "ray"
    pattern = f"session_*/artifacts/*/{experiment_dir.name}/driver_artifacts/{name}"
    return sorted(ray_tmp.glob(pattern), key=lambda p: p.stat().st_mtime)

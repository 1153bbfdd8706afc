"""What makes two trials the same trial: the same resolved run config, trained by the same code.

``--extend`` (``sweeps.runtime.extend``) reuses a finished trial only when both match, so each
child run carries them as tags from its creation:

- ``sweep.config_key``: sha256 of the resolved ``arith`` run config as canonical JSON (sorted
  keys, no spaces), so the key does not depend on how the spec spelled the point (a grid value,
  a ``--set``, a derived value) but only on what ``arith.training.trainer.train`` receives.
- ``sweep.code``: ``arith``'s version and a hash of its source files (``<version>+<12 hex>``):
  an edit to the trainer changes it, as would a release.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import metadata
from pathlib import Path

# The one key of an --extend trial's Tune config: the trial's flat config (its grid point). The
# extend's Tune experiment is a grid over exactly the points it trains, which Tune's grid over
# the spec's axes cannot express (sweeps.runtime.extend).
POINT_KEY = "point"
CONFIG_KEY_TAG = "sweep.config_key"
CODE_TAG = "sweep.code"
# The distribution whose version arith is (pyproject.toml); arith itself holds none.
DISTRIBUTION = "arith-sweeps"


def config_key(run_config) -> str:
    """sha256 of the run config's canonical JSON (``arith.config.RunConfig.to_dict``)."""
    text = json.dumps(run_config.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.cache
def code_fingerprint() -> str:
    """``arith``'s version and the sha256 (12 hex) of torch's version and of arith's ``.py``
    files, path and content, in path order; computed once per process."""
    import arith

    root = Path(arith.__file__).resolve().parent
    digest = hashlib.sha256()
    # The same code on another torch may train differently (kernels, defaults): part of it.
    digest.update(f"torch {_version('torch')}".encode() + b"\0")
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"{_version(DISTRIBUTION)}+{digest.hexdigest()[:12]}"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # a checkout used without installing it
        return "unknown"


def identity_tags(run_config) -> dict[str, str]:
    """The tags a trial's child run is created with."""
    return {CONFIG_KEY_TAG: config_key(run_config), CODE_TAG: code_fingerprint()}


def code_note(trials) -> str:
    """A table caption's warning where the trials (a DataFrame with a ``code`` column) were
    trained by different arith code (``--extend --reuse-stale`` reused trials across a code
    change); empty otherwise."""
    if "code" not in trials.columns or trials["code"].nunique() < 2:
        return ""
    counts = trials["code"].fillna("unknown").value_counts().sort_index()
    versions = "; ".join(f"{code}: {n}" for code, n in counts.items())
    return (
        f" Warning: trials trained by {len(counts)} versions of arith's code ({versions} "
        "trials): some were reused across a code change (--extend --reuse-stale)."
    )


def hardware_note(trials) -> str:
    """A table caption's warning where the trials ran on different kinds of device, or where
    trials asking for one precision (``train.precision``) trained in different ones (their
    resolved ``hardware.device`` and ``hardware.precision`` params: a CPU fp32 trial and a GPU
    bf16 one of one cell, say, after an --extend on another machine); empty otherwise. A
    precision the spec varies on purpose is no warning."""
    if "hardware.device" not in trials.columns:
        return ""
    # a trial stopped early (ASHA) ends without its summary, so without a record: not a device
    trials = trials[trials["hardware.device"].notna()]
    device = trials["hardware.device"].astype(str).str.split(":").str[0]
    resolved = trials.get("hardware.precision")
    label = device if resolved is None else device + " " + resolved.fillna("unknown").astype(str)
    asked = trials.get("train.precision")
    groups = [label] if asked is None else [label[asked == a] for a in asked.dropna().unique()]
    devices_differ = device.nunique() > 1
    if not devices_differ and all(g.nunique() < 2 for g in groups):
        return ""
    counts = "; ".join(f"{k}: {n}" for k, n in label.value_counts().sort_index().items())
    return f" Warning: trials ran on different hardware ({counts} trials)."

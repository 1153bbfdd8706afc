"""The cluster layer's one-line errors, in a module that imports no Ray: an ``except`` naming
them (``sweeps.runtime.preflight.refusals``) imports nothing that can fail. A Ctrl-C during
Ray's import leaves Ray half imported, and an ``except`` that imported ``tunefix`` (which
imports Ray) then ended in a traceback instead of the press's one line."""

from __future__ import annotations

from arith.errors import ConfigError


class ClusterError(ConfigError):
    """A cluster or storage setting that cannot work; ``str(err)`` is the one line printed."""


class UnsupportedRay(Exception):
    """The installed Ray is outside ``sweeps.cluster.tunefix.RAY_RANGE``; ``str(err)`` is the
    one line shown."""

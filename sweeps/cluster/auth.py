"""Token authentication of an existing Ray cluster (Ray 2.60), as ``ray start --head`` sets it up.

``ray start --head`` turns token authentication on when a token exists already, and a local
``ray.init()`` writes one to ``~/.ray/auth_token``: on a machine that ever ran a local sweep,
a head started the default way asks for a token. A client sends it only when ``RAY_AUTH_MODE``
is ``token``. So, before connecting: ask the cluster (one cheap request, no token) whether it
wants a token; if it does and one is at hand, send it; if none is, one line that says where
Ray looks for it.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from arith.errors import ConfigError

MODE_ENV = "RAY_AUTH_MODE"
PLACES = "RAY_AUTH_TOKEN, a file named by RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token"


def token_available() -> bool:
    """A token where Ray's client looks for one (the environment first, then the files)."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    files = [Path.home() / ".ray" / "auth_token"]
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        files.insert(0, Path(os.environ["RAY_AUTH_TOKEN_PATH"]).expanduser())
    for path in files:
        try:
            if path.read_text(encoding="utf-8").strip():
                return True
        except OSError:
            continue
    return False


def http_wants_token(address: str) -> bool:
    """Whether the dashboard / job API at ``address`` (http://host:port) refuses a request
    without a token. Unreachable: False (the caller's own error says so)."""
    try:
        urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=5)
    except urllib.error.HTTPError as err:
        return err.code in (401, 403)
    except (OSError, ValueError):
        return False
    return False


# A cheap call each server authenticates before it answers: the GCS's (host:port) and Ray
# Client's (ray://host:port).
_PROBES = {
    "gcs": "/ray.rpc.NodeInfoGcsService/GetClusterId",
    "ray": "/ray.rpc.RayletDriver/ClusterInfo",
}


# How long the cheap call may take: a GCS answers it in milliseconds; a host that drops
# packets never does (Ray's own connect then retries for many minutes).
PROBE_TIMEOUT_S = 10


def cluster_answer(address: str):
    """The gRPC status of a cheap call, without a token, to the cluster at ``address``: its GCS
    at ``host:port``, or its Ray Client server at ``ray://host:port``. ``OK`` or an error the
    server sent (``UNAUTHENTICATED``: it wants a token; ``UNIMPLEMENTED``: not that kind of
    server), ``UNAVAILABLE`` or ``DEADLINE_EXCEEDED`` when nothing answers; None for what is
    not asked (``auto``: the local head's files; Ray decides)."""
    import grpc

    scheme, _, target = address.rpartition("://")
    if scheme not in ("", "ray") or ":" not in target:
        return None
    channel = grpc.insecure_channel(target)
    try:
        call = channel.unary_unary(_PROBES[scheme or "gcs"])
        call(b"", timeout=PROBE_TIMEOUT_S)
    except grpc.RpcError as err:
        return err.code()
    finally:
        channel.close()
    return grpc.StatusCode.OK


def use_token(field: str, address: str, wanted: bool) -> None:
    """Send the token from now on (this process and its children) when the cluster wants one
    and the mode is not set; ConfigError (one line) when none is at hand."""
    if wanted:
        warn_plain_http(address)
    if not wanted or os.environ.get(MODE_ENV, "").lower() == "token":
        if wanted and not token_available():
            raise ConfigError(field, _missing(address))
        return
    if os.environ.get(MODE_ENV):  # set, to something else: the user's choice, Ray's error
        return
    if not token_available():
        raise ConfigError(field, _missing(address))
    os.environ[MODE_ENV] = "token"
    from sweeps.cluster import tunefix

    tunefix.reread_ray_config()  # a Ray already imported has read its config: read the mode


def warn_plain_http(address: str) -> bool:
    """One line on stderr when the token would cross the network unencrypted: plain
    ``http://`` to an address that is not this machine's loopback. True if it warned."""
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    host = parts.hostname or ""
    local = host == "localhost" or host.startswith("127.") or host == "::1"
    if parts.scheme != "http" or local:
        return False
    print(
        f"warning: the Ray token goes to {parts.scheme}://{parts.netloc} unencrypted (plain "
        "http); use https:// (a TLS proxy in front of the dashboard) or an SSH tunnel to it",
        file=sys.stderr,
    )
    return True


def _missing(address: str) -> str:
    return (
        f"the Ray cluster at {address!r} uses token authentication and no token was found: "
        f"set {MODE_ENV}=token and put the cluster's token in {PLACES}"
    )

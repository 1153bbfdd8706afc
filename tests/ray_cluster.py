"""Real Ray nodes on this machine for the cluster tests: heads and workers started with
``ray start`` as separate Ray nodes (separate raylets, object stores and temp dirs). Ray
advertises this machine's own interface address rather than 127.0.0.1 for its nodes; traffic
stays on the machine. Cleanup stops exactly the processes these nodes started (by session and
temp dir), never ``ray stop``, which would stop every Ray on the machine."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "search_spaces" / "smoke.yaml"
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _session_pids(sid: int, marker: str) -> set[int]:
    """Processes of a session we created, or whose command line names our temp dir."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="ignore")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid or marker in cmdline:
            pids.add(int(entry.name))
    return pids - {os.getpid()}


def _stop(sids: list[int], markers: list[str]) -> None:
    def alive() -> set[int]:
        found: set[int] = set()
        for sid, marker in zip(sids, markers, strict=True):
            found |= _session_pids(sid, marker)
        return found

    # One second's grace: what outlives SIGTERM that long (a worker or two) is killed; the
    # nodes are the test's own and nothing of theirs is kept (a head and a worker stopped in
    # 5.5 s with 4 s of grace, 3.0 s with 1).
    for sig, grace_s in ((signal.SIGTERM, 1), (signal.SIGKILL, 4)):
        for pid in alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.3)


class LocalCluster:
    """A head (with the dashboard, for the job API) and a worker node, both 1 CPU."""

    def __init__(self, tmp: Path) -> None:
        self.port, self.dashboard_port = free_port(), free_port()
        self.client_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.client = f"ray://127.0.0.1:{self.client_port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        # Short temp dirs: Ray's socket paths must stay under ~107 characters. One per node, as
        # on separate machines: nodes sharing a runtime-env folder delete each other's files.
        self.temp_dirs = [f"/tmp/rayt{self.port}h", f"/tmp/rayt{self.port}w"]
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        self.env.pop("RAY_ADDRESS", None)
        self.env.pop("MLFLOW_TRACKING_URI", None)
        self.tmp = tmp
        self.sids: list[int] = []

    def start(self) -> None:
        self.start_head()
        self.add_worker()

    def start_head(self, gpus: int = 0) -> None:
        """The head: 1 CPU, ``gpus`` GPUs declared (none need be there)."""
        head = ["--head", "--port", str(self.port), "--temp-dir", self.temp_dirs[0]]
        head += ["--ray-client-server-port", str(self.client_port)]
        head += ["--include-dashboard=true", "--dashboard-host", "127.0.0.1"]
        head += ["--dashboard-port", str(self.dashboard_port)]
        # Each node's dashboard agent on a free port: the default (52365) may be held by another
        # Ray on this machine, and then the job API answers "No available agent".
        head += ["--dashboard-agent-listen-port", str(free_port())]
        self._ray_start([*head, *self._common(gpus)])

    def add_worker(self, gpus: int = 0, env: dict[str, str] | None = None) -> None:
        """A worker node: 1 CPU, ``gpus`` GPUs declared, more of the environment in ``env``;
        its temp dir the next of ``temp_dirs``."""
        index = len(self.sids)
        if index >= len(self.temp_dirs):
            self.temp_dirs.append(f"/tmp/rayt{self.port}w{index}")
        worker = ["--address", self.address, "--temp-dir", self.temp_dirs[index]]
        worker += ["--dashboard-agent-listen-port", str(free_port())]
        self._ray_start([*worker, *self._common(gpus)], env)

    @staticmethod
    def _common(gpus: int) -> list[str]:
        common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
        return [*common, "--num-gpus", str(gpus)]

    def _ray_start(self, args: list[str], env: dict[str, str] | None = None) -> None:
        log = self.tmp / f"ray-start-{len(self.sids)}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(BIN / "ray"), "start", *args],
                env={**self.env, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.sids.append(proc.pid)  # its session id: new session, so sid == pid
            code = proc.wait(timeout=120)
        assert code == 0, log.read_text()[-3000:]

    def stop(self) -> None:
        _stop(self.sids, self.temp_dirs[: len(self.sids)])
        for temp_dir in self.temp_dirs:  # Ray's session logs; the test's tmp_path keeps its own
            shutil.rmtree(temp_dir, ignore_errors=True)

    def node_ids(self, pids: set[int], wait_s: float = 30.0) -> dict[int, str]:
        """pid -> node id of the worker processes ``pids`` (alive or dead), from Ray's state
        API: its trial actors, and its workers where an actor's record lacks one (one CI run
        once missed a trial's pid in the actor list right after the sweep; its records are
        gathered asynchronously, so this asks again until every pid is known or ``wait_s``
        passes)."""
        code = (
            "from ray.util.state import list_actors, list_workers\n"
            f"kw = dict(address={self.dashboard!r}, detail=True, limit=10000)\n"
            "found = {w.pid: w.node_id for w in list_workers(**kw)}\n"
            "acts = list_actors(filters=[('class_name', '=', 'ImplicitFunc')], **kw)\n"
            "found |= {a.pid: a.node_id for a in acts if a.pid}\n"
            "print(found)\n"
        )
        deadline = time.monotonic() + wait_s
        while True:
            out = subprocess.run(
                [sys.executable, "-c", code], env=self.env, capture_output=True, text=True,
                timeout=60,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr[-2000:]
            found = yaml.safe_load(out.stdout.strip().splitlines()[-1])
            if pids <= set(found) or time.monotonic() > deadline:
                return found
            time.sleep(2)


def run_module(module: str, *args: str, env: dict, cwd: Path, timeout: int = 240):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@functools.cache
def has_token_auth() -> bool:
    """Whether this Ray has token authentication, by its CLI (2.60 has; a Ray without it: its
    default head asks for no token)."""
    found = subprocess.run([str(BIN / "ray"), "get-auth-token", "--help"], capture_output=True)
    return found.returncode == 0


def asks_for_token(head: LocalCluster) -> bool:
    """Whether the head's job API refuses a request without a token: a default head does on
    Ray 2.60 where the token file exists; on 2.55.1, which has the CLI, it did not."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{head.dashboard}/api/version", timeout=10)
    except urllib.error.HTTPError as err:
        return err.code in (401, 403)
    return False


def start_default_head(tmp: Path) -> LocalCluster:
    """A one-node head started the default way (``ray start --head``, no RAY_AUTH_* set) on a
    machine where Ray once wrote its token file (``ray get-auth-token --generate``, as a local
    ``ray.init()`` does): HOME is ``tmp``/home, so the user's ~/.ray is not involved. Its
    ``env`` is the environment of a user of that machine; ``client`` its Ray Client address."""
    head = LocalCluster(tmp)
    head.temp_dirs = head.temp_dirs[:1]
    home = tmp / "home"
    home.mkdir()
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        head.env.pop(name, None)
    head.env["HOME"] = str(home)
    if has_token_auth():
        made = subprocess.run(
            [str(BIN / "ray"), "get-auth-token", "--generate"], env=head.env, capture_output=True
        )
        assert made.returncode == 0 and (home / ".ray" / "auth_token").is_file(), made.stderr
    args = ["--head", "--port", str(head.port), "--temp-dir", head.temp_dirs[0]]
    args += ["--include-dashboard=true", "--dashboard-host", "127.0.0.1"]
    args += ["--dashboard-port", str(head.dashboard_port)]
    args += ["--ray-client-server-port", str(head.client_port)]
    args += ["--dashboard-agent-listen-port", str(free_port())]
    args += ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    try:
        head._ray_start(args)
    except BaseException:
        head.stop()
        raise
    return head

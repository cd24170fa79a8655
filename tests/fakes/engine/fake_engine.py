"""A container engine speaking the Docker Engine API on a unix socket, with real processes as containers.

No engine runs on these machines (DESIGN.md, "Supervisors"), so this one
stands in for it, with the documented endpoints and JSON shapes
(docs.docker.com/reference/api/engine): GET /version,
GET /containers/ID/json, POST /containers/ID/{stop,kill,update,start}. A
container is a real child process (tests/helpers/holder.py) put in a
cgroup named as Docker's systemd driver names it (``docker-ID.scope``) or
Podman's (``libpod-ID.scope``), in the host's cgroup v2 tree, so the guard
finds its owner the way it does on a real host. Restart policies behave as
Docker's: a container that exits without a stop (a signal sent around the
engine, a /kill) is started again after 100 ms unless its policy is "no"; a
stopped one stays down. Every request is recorded for the tests. For the
fault tests, ``hang`` names container actions ("stop", "json"...) the
engine takes and never answers (as a dockerd stuck on a hung container),
and ``after`` is called with each request once it was handled.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

RESTART_DELAY_S = 0.1


def cgroup_root() -> Path | None:
    """The cgroup v2 tree this process's ``0::`` line names, when this process may create cgroups in it."""
    for root in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (root / "cgroup.controllers").exists() and os.access(root, os.W_OK):
            return root
    return None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


@dataclass
class Container:
    id: str
    name: str
    argv: list[str]
    restart: str
    cgroup: Path
    restart_max: int = 0
    proc: subprocess.Popen[str] | None = None
    pid: int = 0  # the holder's pid, "ready PID" on its stdout
    stopping: bool = False
    stopped_by_user: bool = False
    started_at: str = "0001-01-01T00:00:00Z"
    finished_at: str = "0001-01-01T00:00:00Z"
    exit_code: int = 0
    restarts: int = 0
    # Something beside the engine (a compose watcher, a watchdog) starts it
    # again even after a stop: what the guard must catch, not prevent.
    back_after_stop: bool = False
    generation: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    engine: FakeEngine


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def address_string(self) -> str:
        return "unix"

    def _answer(self, status: int, body: Any = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status, body = self.server.engine.handle(method, self.path, raw)
        self._answer(status, body)


class FakeEngine:
    """The engine: its socket, its containers, the requests it was sent."""

    def __init__(self, socket_path: str, *, api: str = "1.43", kind: str = "docker") -> None:
        root = cgroup_root()
        if root is None:
            raise RuntimeError("no writable cgroup v2 tree to put the containers in")
        self.socket_path = socket_path
        self.api = api
        self.kind = kind
        self.base = root / f"suspendguard-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.containers: dict[str, Container] = {}
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.hang: set[str] = set()
        self.after: Callable[[str, str], None] | None = None
        self._released = threading.Event()
        self.refuse_update = False  # answer /update with an error, as an engine may
        self._server = _Server(socket_path, _Handler)
        self._server.engine = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        for c in self.containers.values():
            c.stopped_by_user = True
            if c.running:
                assert c.proc is not None
                with contextlib.suppress(OSError):
                    os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait()
        for d in sorted(self.base.rglob("*"), key=lambda p: -len(p.parts)) if self.base.exists() else []:
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            self.base.rmdir()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    # -- containers --------------------------------------------------------

    def create(self, argv: list[str], *, restart: str = "always", name: str = "job") -> Container:
        cid = uuid.uuid4().hex + uuid.uuid4().hex
        scope = f"docker-{cid}.scope" if self.kind == "docker" else f"libpod-{cid}.scope"
        slice_ = "system.slice" if self.kind == "docker" else "machine.slice"
        cgroup = self.base / slice_ / scope
        cgroup.mkdir(parents=True)
        c = Container(cid, name, argv, "" if restart == "no" else restart, cgroup)
        self.containers[cid] = c
        self._start(c)
        return c

    def _start(self, c: Container) -> None:
        # The child moves itself into the container's cgroup before it
        # becomes the job, so that the job's first /proc/PID/cgroup names it.
        procs = c.cgroup / "cgroup.procs"
        proc = subprocess.Popen(["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *c.argv],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        # Running from the moment its process is, as Docker's State.Running
        # is: not only once the job opened its nodes.
        c.proc, c.started_at = proc, _now()
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "ready", f"container job did not start: {line}"
        c.pid = int(line[1])
        c.stopped_by_user = False
        c.generation += 1
        threading.Thread(target=self._watch, args=(c, proc, c.generation), daemon=True).start()

    def _watch(self, c: Container, proc: subprocess.Popen[str], generation: int) -> None:
        code = proc.wait()
        with c.lock:
            if generation != c.generation:
                return
            c.exit_code, c.finished_at = code, _now()
            comes_back = c.back_after_stop or (not c.stopped_by_user and (
                c.restart in ("always", "unless-stopped") or (c.restart == "on-failure" and code != 0)))
        if comes_back:
            time.sleep(RESTART_DELAY_S)
            with c.lock:
                if generation == c.generation and (c.back_after_stop or not c.stopped_by_user):
                    c.restarts += 1
                    self._start(c)

    def kill_around(self, c: Container, signum: int = signal.SIGINT) -> None:
        """A signal sent to the job around the engine (as a plain drain does)."""
        os.kill(c.pid, signum)

    def wait_running(self, c: Container, timeout: float = 5.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if c.running:
                return True
            time.sleep(0.02)
        return False

    def paths(self, method: str) -> list[str]:
        return [p for m, p, _q, _b in self.requests if m == method]

    # -- the API -----------------------------------------------------------

    def handle(self, method: str, target: str, raw: bytes) -> tuple[int, Any]:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = url.path
        parts = path.strip("/").split("/")
        if parts and parts[0].startswith("v") and parts[0][1:2].isdigit():
            parts = parts[1:]
            path = "/" + "/".join(parts)
        body = json.loads(raw) if raw else None
        self.requests.append((method, path, query, body))
        if method == "GET" and parts == ["version"]:
            return 200, {"Version": "fake", "ApiVersion": self.api, "MinAPIVersion": "1.24",
                         "Os": "linux", "Arch": "amd64"}
        if len(parts) < 3 or parts[0] != "containers":
            return 404, {"message": f"page not found: {path}"}
        c = self.containers.get(parts[1])
        if c is None:
            return 404, {"message": f"No such container: {parts[1]}"}
        action = parts[2]
        if action in self.hang:
            self._released.wait()
            return 500, {"message": "the engine was shut down"}
        answer = self._container(c, method, action, query, body, path)
        if self.after is not None:
            self.after(method, action)
        return answer

    def _container(self, c: Container, method: str, action: str, query: dict[str, str],
                   body: Any, path: str) -> tuple[int, Any]:
        if method == "GET" and action == "json":
            return 200, self._inspect(c)
        if method != "POST":
            return 405, {"message": "method not allowed"}
        if action == "stop":
            return self._stop(c, query)
        if action == "kill":
            if not c.running:
                return 409, {"message": f"Container {c.id} is not running"}
            os.kill(c.pid, int(signal.Signals[query.get("signal", "SIGKILL")]))
            return 204, None
        if action == "update" and self.refuse_update:
            return 500, {"message": "Cannot update container: refused"}
        if action == "update":
            policy = (body or {}).get("RestartPolicy") or {}
            c.restart = "" if policy.get("Name") == "no" else str(policy.get("Name", c.restart))
            c.restart_max = int(policy.get("MaximumRetryCount") or 0)
            return 200, {"Warnings": []}
        if action == "start":
            with c.lock:
                if c.running:
                    return 304, None
                self._start(c)
            return 204, None
        return 404, {"message": f"page not found: {path}"}

    def _inspect(self, c: Container) -> dict[str, Any]:
        running = c.running
        return {
            "Id": c.id, "Name": f"/{c.name}", "Path": c.argv[0], "Args": c.argv[1:],
            "State": {"Status": "running" if running else "exited", "Running": running,
                      "Paused": False, "Restarting": False, "Pid": c.pid if running else 0,
                      "ExitCode": 0 if running else c.exit_code, "StartedAt": c.started_at,
                      "FinishedAt": c.finished_at},
            "HostConfig": {"RestartPolicy": {"Name": c.restart or "no",
                                             "MaximumRetryCount": c.restart_max}},
        }

    def _stop(self, c: Container, query: dict[str, str]) -> tuple[int, Any]:
        if not c.running:
            return 304, None
        assert c.proc is not None
        # Before 1.42 there is no ``signal`` parameter: the container's own
        # stop signal (SIGTERM) is used whatever the client sent.
        signame = query.get("signal", "SIGTERM") if tuple(map(int, self.api.split("."))) >= (1, 42) \
            else "SIGTERM"
        with c.lock:
            c.stopped_by_user = True
        os.kill(c.pid, int(signal.Signals[signame]))
        try:
            c.proc.wait(timeout=float(query.get("t", "10")))
        except subprocess.TimeoutExpired:
            os.killpg(c.proc.pid, signal.SIGKILL)
            c.proc.wait()
        return 204, None


def unix_socket_answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True

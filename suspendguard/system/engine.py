"""Docker's Engine API (and Podman's Docker-compatible one) over the engine's unix socket.

The standard library only: an ``http.client.HTTPConnection`` whose socket
is AF_UNIX. The guard needs four documented endpoints (``/version``,
``/containers/ID/json``, ``/containers/ID/update``, ``/containers/ID/start``);
the ``docker`` SDK and its ``requests`` stack would be a new dependency on
the suspend path for them. Every failure is an ``Unavailable`` saying which
socket and why.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from suspendguard.model import Unavailable
from suspendguard.system import deadline

DOCKER_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock")
PODMAN_SOCKETS = ("/run/podman/podman.sock",)
# The environment variables the engines' own clients read for their socket.
SOCKET_ENV = {"docker": "DOCKER_HOST", "podman": "CONTAINER_HOST"}
# The newest API this client was written against; the server's own is used
# when it is older (the SDK's negotiation).
API_MAX = (1, 43)
TIMEOUT_S = 5.0
_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$")

Version = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Container:
    """What the guard reads of one container (GET /containers/ID/json)."""

    id: str
    name: str
    running: bool
    pid: int
    status: str  # State.Status: running, exited, restarting...
    restart: str  # HostConfig.RestartPolicy.Name; "" is Docker's "no"
    restart_max: int  # HostConfig.RestartPolicy.MaximumRetryCount
    started_at: float  # State.StartedAt as a Unix time; 0 when never started
    finished_at: float = 0.0  # State.FinishedAt as a Unix time; 0 when it never exited


def socket_path(kind: str, environ: Mapping[str, str]) -> str | Unavailable:
    """The API socket of this engine kind: from DOCKER_HOST / CONTAINER_HOST, else the usual places."""
    var = SOCKET_ENV[kind]
    value = environ.get(var, "")
    if value:
        if not value.startswith("unix://"):
            return Unavailable(f"{var}={value} is not a unix socket (unix://PATH): the guard "
                               "talks to the engine on this host only")
        return value[len("unix://"):]
    places = DOCKER_SOCKETS if kind == "docker" else PODMAN_SOCKETS
    for place in places:
        if os.path.exists(place):
            return place
    return Unavailable(f"no {kind} API socket at {' or '.join(places)} (set {var}=unix://PATH)")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _wait_for_answer(conn: _UnixConnection) -> None:
    """Wait for the first bytes of the answer, or the guard's cancel, or the socket's timeout.

    http.client blocks in recv() where a SIGTERM to the guard cannot end
    the wait: the cancel's fd is watched beside the socket here.
    """
    sock = conn.sock
    bound = deadline.current()
    fd = bound.cancel_fd
    if sock is None or fd is None:
        return
    ready, _, _ = select.select([sock, fd], [], [], conn.timeout)
    if fd in ready:
        raise ConnectionAbortedError(f"interrupted: {bound.cancel_reason}")
    if not ready:
        raise TimeoutError("timed out")


class Engine:
    """One engine's API socket; the API version is negotiated on first use."""

    def __init__(self, path: str, timeout_s: float = TIMEOUT_S) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._version: Version | Unavailable | None = None

    # -- the wire -----------------------------------------------------------

    def failed(self, what: str, exc: BaseException) -> Unavailable:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        return Unavailable(f"the engine at {self.path} did not answer {what}: {why}")

    def read(self, conn: _UnixConnection) -> tuple[int, Any]:
        _wait_for_answer(conn)
        response = conn.getresponse()
        data = response.read()
        try:
            body = json.loads(data) if data else None
        except ValueError:
            body = data.decode("utf-8", "replace")
        return response.status, body

    def call(self, method: str, path: str, body: Any = None,
             timeout_s: float | None = None) -> tuple[int, Any] | Unavailable:
        # Inside a guard run, no answer is waited for past its deadline.
        limit = deadline.cap(self.timeout_s if timeout_s is None else timeout_s)
        if deadline.cancelled() or limit <= 0:
            why = (deadline.current().cancel_reason if deadline.cancelled() else
                   "no time was left before the guard's deadline")
            return Refused(f"the engine at {self.path} was not asked {method} {path}: {why}")
        conn = _UnixConnection(self.path, limit)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(method, path, body=payload, headers=headers)
            return self.read(conn)
        except (OSError, http.client.HTTPException) as exc:
            return self.failed(f"{method} {path}", exc)
        finally:
            conn.close()

    # -- the API ------------------------------------------------------------

    def version(self) -> Version | Unavailable:
        """The API version to speak: the server's when older than API_MAX."""
        if self._version is None:
            answer = self.call("GET", "/version")
            if isinstance(answer, Unavailable):
                return answer
            status, body = answer
            got = _parse_version(body.get("ApiVersion")) if isinstance(body, dict) else None
            if status != 200 or got is None:
                return Unavailable(f"the engine at {self.path} answered GET /version with "
                                   f"{status} and no ApiVersion")
            self._version = min(got, API_MAX)
        return self._version

    def _path(self, endpoint: str, **query: str | int) -> str | Unavailable:
        version = self.version()
        if isinstance(version, Unavailable):
            return version
        tail = f"?{urlencode(query)}" if query else ""
        return f"/v{version[0]}.{version[1]}{endpoint}{tail}"

    def inspect(self, cid: str) -> Container | Unavailable | None:
        """The container, None when the engine has no such container."""
        path = self._path(f"/containers/{quote(cid)}/json")
        if isinstance(path, Unavailable):
            return path
        answer = self.call("GET", path)
        if isinstance(answer, Unavailable):
            return answer
        status, body = answer
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            return Unavailable(_error(self.path, "GET", path, status, body))
        state = body.get("State") or {}
        policy = (body.get("HostConfig") or {}).get("RestartPolicy") or {}
        return Container(str(body.get("Id", cid)), str(body.get("Name", "")).lstrip("/"),
                         bool(state.get("Running")), int(state.get("Pid") or 0),
                         str(state.get("Status", "")), str(policy.get("Name") or ""),
                         int(policy.get("MaximumRetryCount") or 0),
                         parse_time(str(state.get("StartedAt") or "")),
                         parse_time(str(state.get("FinishedAt") or "")))

    def set_restart(self, cid: str, name: str, maximum: int = 0) -> str | Unavailable:
        return self._post(f"/containers/{quote(cid)}/update", {},
                          {"RestartPolicy": {"Name": name, "MaximumRetryCount": maximum}})

    def start(self, cid: str) -> str | Unavailable:
        """"" once started, "already running", or why not."""
        return self._post(f"/containers/{quote(cid)}/start", {})

    def _post(self, endpoint: str, query: dict[str, str], body: Any = None) -> str | Unavailable:
        path = self._path(endpoint, **query)
        if isinstance(path, Unavailable):
            return path
        answer = self.call("POST", path, body)
        return answer if isinstance(answer, Unavailable) else post_answer(self.path, path, answer)


@dataclass(frozen=True, slots=True)
class Refused(Unavailable):
    """The engine did nothing of it: it answered with an error, or was never asked (unlike
    an answer that never came, after which it may have done it all the same)."""


def post_answer(where: str, path: str, answer: tuple[int, Any]) -> str | Unavailable:
    """A POST's answer: "" when done, "already running"/"already stopped" (304), "gone" (404)."""
    status, body = answer
    if status in (200, 204):
        return ""
    if status == 304:
        return "already running" if path.split("?")[0].endswith("/start") else "already stopped"
    if status == 404:
        return "gone"
    return Refused(_error(where, "POST", path, status, body))


def _error(where: str, method: str, path: str, status: int, body: Any) -> str:
    message = body.get("message") if isinstance(body, dict) else body
    return (f"the engine at {where} answered {method} {path.split('?')[0]} with {status}" +
            (f": {message}" if message else ""))


def _parse_version(text: Any) -> Version | None:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def parse_time(text: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, Z or an offset) as a Unix time; 0 when absent."""
    m = _TIME.match(text)
    if not m or text.startswith("0001-"):
        return 0.0
    zone = m.group(3) if m.group(3) not in (None, "Z") else "+00:00"
    try:
        stamp = datetime.fromisoformat(f"{m.group(1)}.{(m.group(2) or '0')[:6]:0<6}{zone}")
    except ValueError:
        return 0.0
    return stamp.timestamp()

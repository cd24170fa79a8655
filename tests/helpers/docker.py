"""A private Docker Engine (Debian's docker.io) inside the suite's PID namespace.

Started as DESIGN.md's "A real Docker Engine here" says: no network, no
iptables, its own data and exec roots and socket in a temporary folder, so
its containers are processes of the suite's PID namespace and the guard
sees and signals them as it would on a host. No registry is reachable: the
image is an empty tar, and the containers get the host's interpreter and
this checkout through read-only binds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers import REPO
from helpers.wait import wait_for

IMAGE = "suspendguard-empty:1"
# Debian's own client first: another docker on PATH may be far newer than the engine.
CLIENTS = ("/usr/bin/docker", "docker")
# What a container needs of the host to run the test jobs.
BINDS = ("/usr", "/lib", "/lib64", "/bin", str(REPO))


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "a Docker Engine runs as root only"
    if shutil.which("dockerd") is None or _client() is None:
        return "docker.io is not installed (tools/test installs it as root)"
    return None


def _client() -> str | None:
    return next((c for c in CLIENTS if shutil.which(c)), None)


class DockerEngine:
    """One dockerd and its containerd, their folders under ``root``; closed with every container."""

    def __init__(self, root: Path, boot_timeout: float = 60.0) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.client = _client() or "docker"
        self.boot_timeout = boot_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def __enter__(self) -> DockerEngine:
        (self.root / "empty").mkdir(parents=True, exist_ok=True)
        with open(self.root / "dockerd.log", "wb") as log:
            self.proc = subprocess.Popen(
                ["dockerd", "--iptables=false", "--ip-masq=false", "--bridge=none",
                 "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
                 "--host", self.host, "--pidfile", str(self.root / "docker.pid")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
            tar = subprocess.Popen(["tar", "-C", str(self.root / "empty"), "-c", "."],
                                   stdout=subprocess.PIPE)
            subprocess.run([self.client, "-H", self.host, "import", "-", IMAGE], stdin=tar.stdout,
                           check=True, capture_output=True, timeout=60)
            tar.wait()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.boot_timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited: {self.log_tail()}")
            if self.socket.exists() and self.docker("version", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"dockerd did not answer within {self.boot_timeout:g} s: "
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return " | ".join((self.root / "dockerd.log").read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False, timeout=60)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root / "data")

    # -- the client -------------------------------------------------------

    def docker(self, *args: str, check: bool = True,
               timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.client, "-H", self.host, *args], capture_output=True,
                                text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {result.stderr.strip()}")
        return result

    def run(self, name: str, argv: Sequence[str], *, node: str, restart: str = "no",
            init: bool = False, writable: Sequence[str] = ()) -> str:
        """Start a detached container holding ``node`` (as /dev/davinci0); its id.

        A device node goes in with ``--device``; a plain file standing for one
        (its identity is unique, so nothing else on the host can hold it) is bound.
        """
        binds = [f"--volume={b}:{b}:ro" for b in BINDS if os.path.exists(b)]
        into = (f"--device={node}:/dev/davinci0" if stat.S_ISCHR(os.stat(node).st_mode)
                else f"--volume={node}:/dev/davinci0")
        binds += [f"--volume={w}:{w}" for w in writable]
        out = self.docker("run", "--detach", f"--name={name}", "--network=none",
                          f"--restart={restart}", *(["--init"] if init else []),
                          into, *binds, IMAGE, *argv)
        return out.stdout.strip()

    def inspect(self, name: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(self.docker("inspect", name).stdout)
        return found[0]

    def policy(self, name: str) -> tuple[str, int]:
        p = self.inspect(name)["HostConfig"]["RestartPolicy"]
        return str(p["Name"]), int(p["MaximumRetryCount"])

    def running(self, name: str) -> bool:
        return bool(self.inspect(name)["State"]["Running"])

    def wait_running(self, name: str, timeout: float = 15.0) -> bool:
        return wait_for(lambda: self.running(name), timeout, interval=0.1)

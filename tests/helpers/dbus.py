"""A real private dbus-daemon that looks like the system bus, and fake services on it.

Context managers, wrapped into fixtures by the test modules that need them:
`private_system_bus()` starts dbus-daemon with tests/fakes/dbus/system.conf on a
socket in a fresh temporary folder; `fake_service(bus, ...)` runs
tests/fakes/dbus/serve.py (fake logind and/or systemd1) as a separate process
on it. Both stop what they started even when the test fails. The client finds
the bus the standard way: DBUS_SYSTEM_BUS_ADDRESS, set by the test.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAKES = Path(__file__).resolve().parent.parent / "fakes" / "dbus"
START_TIMEOUT = 10.0


@dataclass(frozen=True)
class PrivateBus:
    address: str
    socket: Path
    folder: Path


def dbus_daemon() -> str | None:
    return shutil.which("dbus-daemon")


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _read_line(proc: subprocess.Popen[Any], what: str, log: Path) -> str:
    """The first line the process prints, within START_TIMEOUT, or a clear failure."""
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            line: str = proc.stdout.readline()
            if line:
                return line.strip()
        if proc.poll() is not None:
            break
    _stop(proc)
    raise RuntimeError(f"{what} did not start: {log.read_text(errors='replace')[-2000:]}")


@contextmanager
def private_system_bus(socket_name: str = "system_bus_socket") -> Iterator[PrivateBus]:
    """``socket_name``: the socket's path in the folder (``systemd/private``: where a
    user manager's private socket lies in its runtime folder)."""
    daemon = dbus_daemon()
    if daemon is None:
        raise RuntimeError("dbus-daemon is not installed")
    # A short folder in /tmp: a unix socket path must fit in 108 bytes.
    folder = Path(tempfile.mkdtemp(prefix="sg-bus-"))
    socket = folder / socket_name
    socket.parent.mkdir(parents=True, exist_ok=True)
    address = f"unix:path={socket}"
    log = folder / "dbus-daemon.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [daemon, f"--config-file={FAKES / 'system.conf'}", "--nofork", "--nopidfile",
             f"--address={address}", "--print-address"],
            stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        printed = _read_line(proc, "dbus-daemon", log)
        assert printed.startswith(address), printed
        yield PrivateBus(address=address, socket=socket, folder=folder)
    finally:
        _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def fake_service(bus: PrivateBus, state: dict[str, Any] | None = None,
                 services: Sequence[str] = ("logind", "systemd"),
                 silent: bool = False, serve: Path | None = None
                 ) -> Iterator[subprocess.Popen[str]]:
    """Run fake logind/systemd1 until the block ends; READY means the names are owned.
    ``serve``: a script of the test's own that runs serve.py's main with a fake extended."""
    argv = [sys.executable, str(serve or FAKES / "serve.py"), "--address", bus.address,
            "--state", json.dumps(state or {})]
    for service in services:
        argv += ["--service", service]
    if silent:
        argv.append("--silent")
    log = bus.folder / f"fake-{os.getpid()}-{time.monotonic_ns()}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert _read_line(proc, "the fake service", log) == "READY"
        yield proc
    finally:
        _stop(proc)

"""The suite's pytest plugin: device nodes, configs, holder jobs, a private system bus and Docker Engine."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import docker
from helpers.dbus import PrivateBus, fake_service, private_system_bus
from helpers.holders import Holders
from helpers.isolation import NODE_RDEV, ROOT
from helpers.kernels import Kernel, ipykernel_missing
from suspendguard.config import Config, build


@pytest.fixture
def node(tmp_path: Path) -> str:
    """A compute node: rdev NODE_RDEV as root, a plain file otherwise.

    As root, processes outside the suite may hold a node with this rdev too;
    only the private PID namespace (tools/test) keeps them out of a test's sight.
    """
    path = tmp_path / "npu0"
    if ROOT:
        os.mknod(path, 0o666 | 0o020000, NODE_RDEV)
    else:
        path.write_bytes(b"\0" * 4096)
    return str(path)


@pytest.fixture
def make_config(tmp_path: Path, node: str) -> Any:
    def make(**sections: dict[str, Any]) -> Config:
        data: dict[str, dict[str, Any]] = {
            "devices": {"families": [], "nodes": [node]},
            "state": {"dir": str(tmp_path / "state")},
            "idle": {"backends": []},
            "drain": {"timeout_s": 5},
        }
        for name, values in sections.items():
            data.setdefault(name, {}).update(values)
        return build(data)

    return make


@pytest.fixture
def conf(tmp_path: Path, node: str) -> Path:
    """A config file on disk for CLI runs: the test node only, no idle backends."""
    path = tmp_path / "config.toml"
    path.write_text(
        f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        '[idle]\nbackends = []\n[drain]\ntimeout_s = 5\n'
    )
    return path


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[Any]]]:
    """Processes a test starts by hand: killed and reaped after it."""
    procs: list[subprocess.Popen[Any]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[Holders]:
    h = Holders(tmp_path)
    yield h
    h.cleanup()


@pytest.fixture
def kernel(tmp_path: Path, node: str) -> Iterator[Kernel]:
    """A real idle Jupyter kernel holding the test node (helpers/kernels.py)."""
    reason = ipykernel_missing()
    if reason is not None:
        pytest.skip(reason)
    k = Kernel(tmp_path)
    try:
        k.command(f"hold {node}")
        yield k
    finally:
        k.close()


@pytest.fixture
def bus(monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateBus]:
    """A private dbus-daemon shaped like the system bus, found the standard way."""
    with private_system_bus() as private:
        monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", private.address)
        yield private


@pytest.fixture
def fakes(bus: PrivateBus) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start fake logind/systemd1 services on the bus; all stop when the test ends."""
    with contextlib.ExitStack() as stack:
        def start(state: dict[str, Any] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
            return stack.enter_context(fake_service(bus, state, **kwargs))
        yield start


@pytest.fixture
def no_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A system bus address where nothing listens."""
    address = f"unix:path={tmp_path / 'no-bus-here'}"
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", address)
    return address


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[docker.DockerEngine]:
    """One private Docker Engine for the session (helpers/docker.py), stopped at its end."""
    reason = docker.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with docker.DockerEngine(tmp_path_factory.mktemp("docker")) as engine:
        yield engine

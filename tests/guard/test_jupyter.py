"""Jupyter kernels: told by their connection file, named in the veto, shut down through their control channel.

The kernels are real: ipykernel started by jupyter_client's KernelManager
(helpers/jupyter_manager.py) under the system python3, holding the test node
from a cell, as a notebook's kernel holds a device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.isolation import needs_root
from helpers.kernels import SYSTEM_PYTHON, Kernel, ipykernel_missing

from suspendguard.config import DevicesConfig, build
from suspendguard.errors import ConfigError
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.jupyter import (
    JupyterKernel,
    connection_file_arg,
    describe,
    kernel_of,
    request_shutdown,
)
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Holder
from suspendguard.system.procfs import ProcFS, Stat

CONNECTION = {"shell_port": 50001, "iopub_port": 50002, "stdin_port": 50003,
              "control_port": 50004, "hb_port": 50005, "ip": "127.0.0.1", "key": "k3y",
              "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": ""}


def holder_of(node: str, pid: int) -> Holder:
    holders = scan_holders(take_inventory(DevicesConfig((), (node,), ()))).holders
    found = [h for h in holders if h.pid == pid]
    assert found, f"pid {pid} does not hold {node}: {[h.pid for h in holders]}"
    return found[0]


def test_kernel_of_recognises_a_real_kernel(kernel: Kernel, node: str) -> None:
    holder = holder_of(node, kernel.pid)
    found = kernel_of(holder, ProcFS())
    assert found is not None
    info = json.loads(Path(kernel.connection_file).read_text())
    assert (found.pid, found.start_time, found.uid) == (kernel.pid, holder.start_time, os.getuid())
    assert found.gid == os.getgid()
    assert found.connection_file == kernel.connection_file
    assert (found.transport, found.ip, found.control_port) == ("tcp", "127.0.0.1",
                                                                info["control_port"])
    assert (found.key, found.signature_scheme) == (info["key"], info["signature_scheme"])
    assert info["key"] not in repr(found)  # the key never reaches a log line
    assert found.parent == (kernel.manager.pid, "jupyter_manager.py")
    assert found.python and os.path.samefile(found.python, f"/proc/{kernel.pid}/exe")
    assert found.unreachable == ""


@pytest.mark.parametrize("argv", [
    ["-m", "IPython", "kernel", "-f", "{connection_file}"],
    ["-m", "ipykernel_launcher", "--IPKernelApp.connection_file={connection_file}"],
], ids=["ipython-kernel", "connection-file-trait"])
def test_a_kernel_started_by_another_of_its_command_lines_is_a_kernel(
        tmp_path: Path, node: str, argv: list[str]) -> None:
    """IPython's own ``kernel`` subcommand and the trait ``-f`` sets start the same kernel:
    told as one, it is never sent SIGINT."""
    if ipykernel_missing() is not None:
        pytest.skip(str(ipykernel_missing()))
    kernel = Kernel(tmp_path, argv=[SYSTEM_PYTHON, *argv])
    try:
        kernel.command(f"hold {node}")
        holder = holder_of(node, kernel.pid)
        assert holder.cmdline[1:3] == tuple(argv[:2]), holder.cmdline
        found = kernel_of(holder, ProcFS())
        assert found is not None and found.connection_file == kernel.connection_file
    finally:
        kernel.close()


def test_describe_names_the_kernel_its_server_and_the_way_out(kernel: Kernel, node: str) -> None:
    found = kernel_of(holder_of(node, kernel.pid), ProcFS())
    assert found is not None
    text = describe(found)
    assert text.startswith(f"pid {kernel.pid} {found.comm} (user ")
    assert f"is a Jupyter kernel (connection file {kernel.connection_file}, server pid " \
           f"{kernel.manager.pid} jupyter_manager.py)" in text
    assert "never exits on SIGINT" in text and "Kernel > Shut Down Kernel" in text
    assert text.endswith('set [drain] jupyter = "shutdown"')
    assert "\n" not in text
    alone = describe(replace(found, parent=None))
    assert "server pid" not in alone and f"(connection file {kernel.connection_file}):" in alone


def test_request_shutdown_ends_an_idle_kernel(kernel: Kernel, node: str) -> None:
    found = kernel_of(holder_of(node, kernel.pid), ProcFS())
    assert found is not None
    started = time.monotonic()
    assert request_shutdown(found, 10.0) is None
    assert kernel.wait_exit(5.0) == 0, "the kernel did not exit on its own within 5 s"
    assert time.monotonic() - started < 8


def test_a_wrongly_signed_request_is_refused_and_the_kernel_lives(kernel: Kernel, node: str) -> None:
    found = kernel_of(holder_of(node, kernel.pid), ProcFS())
    assert found is not None
    started = time.monotonic()
    error = request_shutdown(replace(found, key="not-the-key"), 2.0)
    assert error is not None and error.startswith(f"Jupyter kernel pid {kernel.pid}: ")
    assert "shutdown_reply" in error or "no answer" in error or "killed" in error, error
    assert time.monotonic() - started < 4, "the child outlived its timeout"
    assert kernel.alive()


def test_a_busy_kernel_finishes_its_cell_and_is_never_interrupted(
        kernel: Kernel, node: str, tmp_path: Path) -> None:
    found = kernel_of(holder_of(node, kernel.pid), ProcFS())
    assert found is not None
    progress = tmp_path / "progress"
    steps = 30
    kernel.command(f"busy {progress} {steps}")
    assert request_shutdown(found, 10.0) is None  # the control channel answers while a cell runs
    seen = len(progress.read_text().splitlines())
    assert seen < steps
    time.sleep(0.5)
    assert kernel.alive()
    assert len(progress.read_text().splitlines()) > seen, "the cell stopped progressing"
    assert kernel.wait_exit(steps * 0.1 + 10) == 0
    lines = progress.read_text().splitlines()
    assert "interrupted" not in lines
    assert lines == [str(i) for i in range(steps)] + ["done"]


def test_unreachable_and_deleted_interpreter_are_said_not_tried(kernel: Kernel, node: str) -> None:
    found = kernel_of(holder_of(node, kernel.pid), ProcFS())
    assert found is not None
    away = request_shutdown(replace(found, unreachable="it runs in another network namespace"), 5)
    assert away == f"Jupyter kernel pid {kernel.pid}: it runs in another network namespace"
    gone = request_shutdown(replace(found, python=""), 5)
    assert gone is not None and "interpreter was deleted" in gone
    assert kernel.alive()


FakeKernel = Callable[..., Holder]
# Processes that only look like kernels: a script named ipykernel_launcher.py
# that holds the node (no ipykernel needed).
FAKE_KERNEL = ("import sys, time\nnode = open(sys.argv[-1], 'rb')\nprint('ready', flush=True)\n"
               "time.sleep(120)\n")


@pytest.fixture
def fake_kernel(tmp_path: Path, node: str) -> Iterator[FakeKernel]:
    script = tmp_path / "ipykernel_launcher.py"
    script.write_text(FAKE_KERNEL)
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> Holder:
        proc = subprocess.Popen([sys.executable, str(script), *args, node],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return holder_of(node, proc.pid)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def write_connection(path: Path, content: object, mode: int = 0o600) -> str:
    path.write_text(json.dumps(content))
    path.chmod(mode)
    return str(path)


def test_a_command_line_alone_does_not_make_a_kernel(fake_kernel: FakeKernel, tmp_path: Path) -> None:
    assert kernel_of(fake_kernel("-f", "/nonexistent"), ProcFS()) is None
    plain = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "-m", "ipykernel_launcher", "-f",
         write_connection(tmp_path / "c.json", CONNECTION)], start_new_session=True)
    try:
        assert connection_file_arg(tuple(ProcFS().cmdline(plain.pid))) is None
    finally:
        plain.kill()
        plain.wait()


@pytest.mark.parametrize("content", [[], "x", {**CONNECTION, "key": 5},
                                     {k: v for k, v in CONNECTION.items() if k != "control_port"},
                                     {**CONNECTION, "control_port": "50004"},
                                     {**CONNECTION, "transport": "udp"},
                                     {**CONNECTION, "signature_scheme": "none"}])
def test_a_file_that_is_no_connection_file_makes_no_kernel(fake_kernel: FakeKernel,
                                                           tmp_path: Path, content: object) -> None:
    conn = write_connection(tmp_path / "c.json", content)
    assert kernel_of(fake_kernel("-f", conn), ProcFS()) is None


def test_a_valid_connection_file_is_read_relative_or_absolute(fake_kernel: FakeKernel,
                                                              tmp_path: Path) -> None:
    conn = write_connection(tmp_path / "c.json", CONNECTION)
    found = kernel_of(fake_kernel(f"--f={conn}"), ProcFS())
    assert isinstance(found, JupyterKernel) and found.control_port == 50004 and found.key == "k3y"
    os.chdir(tmp_path)  # the child's folder: a relative path is the kernel's, not the guard's
    try:
        relative = kernel_of(fake_kernel("-f", "c.json"), ProcFS())
    finally:
        os.chdir("/")
    assert relative is not None and relative.connection_file == conn


class _Reused(ProcFS):
    """/proc as it reads once the holder's pid went to another process after everything was read."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid

    def stat(self, pid: int, at: int | None = None) -> Stat | None:
        st = super().stat(pid, at)
        return replace(st, start_time=st.start_time + 1) if st and pid == self.pid else st


def test_a_pid_taken_over_while_it_was_read_makes_no_kernel(fake_kernel: FakeKernel,
                                                            tmp_path: Path) -> None:
    holder = fake_kernel("-f", write_connection(tmp_path / "c.json", CONNECTION))
    assert kernel_of(holder, ProcFS()) is not None
    assert kernel_of(holder, _Reused(holder.pid)) is None
    assert kernel_of(replace(holder, start_time=holder.start_time + 1), ProcFS()) is None


def test_a_symlink_or_oversized_connection_file_is_not_followed(fake_kernel: FakeKernel,
                                                                tmp_path: Path) -> None:
    real = write_connection(tmp_path / "real.json", CONNECTION)
    (tmp_path / "link.json").symlink_to(real)
    assert kernel_of(fake_kernel("-f", str(tmp_path / "link.json")), ProcFS()) is None
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**CONNECTION, "pad": "x" * 70000}))
    assert kernel_of(fake_kernel("-f", str(big)), ProcFS()) is None


@needs_root
def test_a_connection_file_of_another_user_is_refused(fake_kernel: FakeKernel, tmp_path: Path) -> None:
    conn = write_connection(tmp_path / "c.json", CONNECTION, 0o644)
    os.chown(conn, 65534, 65534)  # nobody's: root's process may not be pointed at it
    assert kernel_of(fake_kernel("-f", conn), ProcFS()) is None
    os.chown(conn, 0, 0)
    assert kernel_of(fake_kernel("-f", conn), ProcFS()) is not None


@pytest.mark.parametrize(("argv", "expected"), [
    (("/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/k.json"), "/k.json"),
    (("python3", "-m", "ipykernel", "--f=/k.json"), "/k.json"),
    (("/opt/conda/bin/python", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "k.json"),
     "k.json"),
    (("python3.11", "-X", "frozen_modules=off", "-E", "-mipykernel.kernelapp", "-f=/k.json"),
     "/k.json"),
    (("/usr/bin/python3", "/usr/lib/python3/dist-packages/ipykernel_launcher.py", "-f", "/k.json"),
     "/k.json"),
    # Python's one-letter options run together, as a kernel spec may write them.
    (("/usr/bin/python3", "-Im", "ipykernel_launcher", "-f", "/k.json"), "/k.json"),
    (("/usr/bin/python3", "-IWignore", "-m", "ipykernel_launcher", "-f", "/k.json"), "/k.json"),
    # IPython's own "kernel" subcommand, and the trait -f sets.
    (("/usr/bin/python3", "-m", "IPython", "kernel", "-f", "/k.json"), "/k.json"),
    (("/usr/bin/python3", "/usr/bin/ipython3", "kernel", "-f=/k.json"), "/k.json"),
    (("/usr/bin/python3", "-m", "ipykernel_launcher", "--IPKernelApp.connection_file=/k.json"),
     "/k.json"),
    (("/usr/bin/python3", "-m", "ipykernel", "--IPKernelApp.connection_file", "/k.json"),
     "/k.json"),
    (("/usr/bin/python3", "-m", "IPython", "-f", "/k.json"), None),  # a terminal IPython
    (("/usr/bin/python3", "/usr/bin/ipython3", "notebook", "-f", "/k.json"), None),
    (("/usr/bin/python3", "-m", "ipykernel_launcher"), None),
    (("/usr/bin/python3", "-m", "ipykernel_launcher", "-f"), None),
    (("/usr/bin/python3", "-m", "notebook", "-f", "/k.json"), None),
    (("/usr/bin/python3", "-c", "pass", "-m", "ipykernel_launcher", "-f", "/k.json"), None),
    (("/usr/bin/python3", "train.py", "-m", "ipykernel_launcher", "-f", "/k.json"), None),
    (("/bin/sh", "ipykernel_launcher.py", "-f", "/k.json"), None),
])
def test_connection_file_arg(argv: tuple[str, ...], expected: str | None) -> None:
    assert connection_file_arg(argv) == expected


def test_drain_jupyter_setting() -> None:
    assert build({}).drain.jupyter == "veto"
    assert build({"drain": {"jupyter": "shutdown"}}).drain.jupyter == "shutdown"
    with pytest.raises(ConfigError, match='expected one of "veto", "shutdown"'):
        build({"drain": {"jupyter": "kill"}})


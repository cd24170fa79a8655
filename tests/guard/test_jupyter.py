"""Jupyter kernels: told by their connection file, named in the veto, shut down through their control channel.

The kernels are real: ipykernel started by jupyter_client's KernelManager
(helpers/jupyter_manager.py) under the system python3, holding the test node
from a cell, as a notebook's kernel holds a device.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.holders import HOLDER, Holders
from helpers.isolation import needs_root
from helpers.kernels import SYSTEM_PYTHON, Kernel, ipykernel_missing
from helpers.runners import guard

from suspendguard.config import DevicesConfig, build
from suspendguard.errors import ConfigError
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.jupyter import (
    JupyterKernel,
    connection_file_arg,
    describe,
    kernel_of,
    read_connection_file,
)
from suspendguard.guard.jupyter_ask import cannot_ask, request_shutdown
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


def test_request_shutdown_ends_an_idle_kernel(kernel: Kernel, node: str, tmp_path: Path) -> None:
    found = kernel_of(holder_of(node, kernel.pid), ProcFS())
    assert found is not None
    started = time.monotonic()
    assert request_shutdown(found, 10.0) is None
    assert kernel.wait_exit(5.0) == 0, "the kernel did not exit on its own within 5 s"
    assert time.monotonic() - started < 8
    # Its history went to the test's own IPython folder: a kernel of another test holding a
    # shared ~/.ipython's history.sqlite would hold this one's exit for sqlite's 5 s.
    assert (tmp_path / "ipython-kernel-test" / "profile_default" / "history.sqlite").is_file()


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
    steps = 60  # 6 s: past the request's child (it imports jupyter_client) on a loaded machine
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

    def start(*args: str, prefix: Sequence[str] = (), python: str = sys.executable) -> Holder:
        """``prefix``: what runs the interpreter (``unshare``); ``python``: that interpreter."""
        proc = subprocess.Popen([*prefix, python, str(script), *args, node],
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
                                     {**CONNECTION, "ip": "fe80::1%\ud800"},  # no name encodes
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



def test_a_kernel_that_cannot_be_asked_is_said_so_not_tried(kernel: Kernel, node: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``request_shutdown`` would answer at once, known before the drain (RunState._jupyter
    vetoes on it before anyone is signalled): the veto's reason says why, and the way out."""
    found = kernel_of(holder_of(node, kernel.pid), ProcFS())
    assert found is not None and cannot_ask(found) == ""
    assert cannot_ask(replace(found, python="")) == "its interpreter was deleted (upgraded?)"
    away = replace(found, unreachable="it runs in another network namespace (a container?)")
    assert cannot_ask(away) == away.unreachable
    monkeypatch.setattr(os, "geteuid", lambda: found.uid + 4321)  # a guard run as another user
    assert cannot_ask(found) == (f"it runs as uid {found.uid}; only root or that user can ask "
                                 "it to shut down")
    assert request_shutdown(found, 5) == f"Jupyter kernel pid {kernel.pid}: {cannot_ask(found)}"
    monkeypatch.undo()
    text = describe(away, cannot_ask(away))
    assert text.endswith('and the guard cannot ask it to shut down ([drain] jupyter = "shutdown"): '
                         "it runs in another network namespace (a container?); shut the kernel "
                         "down from its notebook (Kernel > Shut Down Kernel)"), text
    assert "\n" not in text and kernel.alive()


@pytest.mark.parametrize("why", ["network-namespace", "deleted-interpreter", "control-port"])
def test_a_kernel_that_cannot_be_asked_vetoes_before_anyone_is_signalled(
        fake_kernel: FakeKernel, holders: Holders, make_config: Callable[..., object], node: str,
        tmp_path: Path, why: str) -> None:
    """[drain] jupyter = "shutdown", and a kernel the request cannot reach (another network
    namespace; a control port the guard cannot connect to, as the unit's IPAddressAllow=
    refuses an address off loopback), or whose interpreter is gone: the ask is certain to
    fail, so the suspend is vetoed at once, naming why, and no other job is sent SIGINT for
    it; check says the same."""
    if why == "network-namespace" and os.geteuid() != 0:
        pytest.skip("needs root (unshare --net)")
    closed = socket.socket()  # bound and not listening: a connection to it is refused
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    conn = write_connection(tmp_path / "c.json", {**CONNECTION, "control_port": port})
    if why == "control-port":
        holder = fake_kernel("-f", conn)
        said = f"its control port 127.0.0.1:{port} cannot be reached from the guard (Connection refused)"
    elif why == "network-namespace":
        holder = fake_kernel("-f", conn, prefix=["unshare", "--net", "--"])
        said = "it runs in another network namespace (a container?)"
    else:  # an apt upgrade of python3.x deletes the file every kernel started before it runs
        python = tmp_path / "old" / "python3"
        python.parent.mkdir()
        shutil.copy2(os.path.realpath(sys.executable), python)
        holder = fake_kernel("-f", conn, python=str(python))
        python.unlink()
        said = "its interpreter was deleted (upgraded?)"
    job, job_pid = holders.start(node)
    cfg = make_config(drain={"jupyter": "shutdown"})
    for report in (guard(cfg, dry_run=True, record=False), guard(cfg)):
        assert report.verdict.kind == "veto", report.verdict.texts
        (reason,) = [r for r in report.verdict.texts if f"pid {holder.pid} " in r]
        assert f'cannot ask it to shut down ([drain] jupyter = "shutdown"): {said};' in reason
        assert "Kernel > Shut Down Kernel" in reason
        assert all(f"pid {job_pid} " not in r for r in report.verdict.texts)
    assert holders.signals() == []  # the other job was never sent SIGINT for a certain veto
    assert job.poll() is None and ProcFS().stat(holder.pid) is not None
    closed.close()


def test_a_guard_that_may_open_no_inet_socket_leaves_the_port_to_the_request(
        fake_kernel: FakeKernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch unit may open AF_UNIX sockets alone: that its dry run cannot connect says
    nothing of the kernel, which the veto unit's request may reach. It is not a veto there."""
    closed = socket.socket()  # bound and not listening: a connection to it is refused
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    found = kernel_of(fake_kernel("-f", write_connection(
        tmp_path / "c.json", {**CONNECTION, "control_port": port})), ProcFS())
    assert found is not None
    assert cannot_ask(found).startswith(f"its control port 127.0.0.1:{port} cannot be reached")

    def no_inet(*_args: object, **_kwargs: object) -> socket.socket:
        raise OSError(errno.EAFNOSUPPORT, os.strerror(errno.EAFNOSUPPORT))

    monkeypatch.setattr(socket, "socket", no_inet)  # as RestrictAddressFamilies=AF_UNIX does
    assert cannot_ask(found) == ""
    closed.close()


@needs_root
def test_a_kernel_is_reached_from_a_mount_namespace_of_the_same_files(
        kernel: Kernel, node: str, tmp_path: Path) -> None:
    """The unit's ProtectSystem=strict gives the guard a mount namespace of its own, of the
    same files, read-only: the kernel is reached all the same, and shuts down when asked."""
    code = textwrap.dedent(f"""\
        import json
        from suspendguard.guard.describe import describe_process
        from suspendguard.guard.jupyter import kernel_of
        from suspendguard.guard.jupyter_ask import request_shutdown
        from suspendguard.system.procfs import ProcFS
        found = kernel_of(describe_process({kernel.pid}, []), ProcFS())
        print(json.dumps({{"unreachable": found.unreachable, "error": request_shutdown(found, 10)}}))
    """)
    read_only = f"mount --bind {tmp_path} {tmp_path} && mount -o remount,bind,ro {tmp_path}"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f'{read_only} && exec "$0" -c "$1"', sys.executable, code],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"unreachable": "", "error": None}, done.stdout
    assert kernel.wait_exit(5) == 0


@needs_root
def test_a_tcp_kernel_whose_connection_file_the_guard_does_not_see_is_reached_all_the_same(
        fake_kernel: FakeKernel, tmp_path: Path) -> None:
    """A kernel in a mount namespace of its own with another file at its connection file's
    path (a private tmpfs over its runtime folder, as a server unit's PrivateTmp=): the
    request goes to its port with the info the guard read through /proc/PID/root, run by its
    interpreter, which the guard sees as the kernel does."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    control = socket.create_server(("127.0.0.1", 0))  # its control port, listening
    info = {**CONNECTION, "control_port": control.getsockname()[1]}
    theirs = write_connection(tmp_path / "theirs.json", info)
    ours = write_connection(runtime / "c.json", info)  # same text, not the same file
    private = f'mount -t tmpfs tmpfs {runtime} && cp {theirs} {ours} && exec "$0" "$@"'
    holder = fake_kernel("-f", ours, prefix=["unshare", "--mount", "--propagation", "private",
                                              "sh", "-c", private])
    found = kernel_of(holder, ProcFS())
    assert found is not None and found.connection_file == ours
    assert found.unreachable == "", found
    assert cannot_ask(found) == ""
    control.close()


def test_an_ipc_kernel_is_reached_through_its_control_socket(fake_kernel: FakeKernel,
                                                             tmp_path: Path) -> None:
    """An ipc kernel is talked to through its control socket, IP-PORT (relative: in the
    kernel's folder), not its network namespace: that file must be there for the guard."""
    ipc = {**CONNECTION, "transport": "ipc", "ip": "kernel-ipc"}
    socket = tmp_path / "kernel-ipc-50004"
    socket.touch()  # stands for the socket the kernel binds
    os.chdir(tmp_path)
    try:
        holder = fake_kernel("-f", write_connection(tmp_path / "c.json", ipc))
    finally:
        os.chdir("/")
    found = kernel_of(holder, ProcFS())
    assert found is not None and found.ip == str(tmp_path / "kernel-ipc") and found.unreachable == ""
    socket.unlink()
    gone = kernel_of(holder, ProcFS())
    assert gone is not None and gone.unreachable.startswith(
        f"the guard does not see its control socket {socket} as the kernel does")


# A kernel whose cell started a job that holds the node (helpers/holder.py), saving for
# --delay seconds after its SIGINT: the kernel is asked only once the job has left.
SPAWNING_KERNEL = """\
import subprocess, sys, time
node = open(sys.argv[-1], "rb")
job = subprocess.Popen([sys.executable, *sys.argv[3:-1]], stdout=subprocess.PIPE, text=True)
print(job.stdout.readline().split()[1], flush=True)
time.sleep(120)
"""


def test_a_kernel_whose_cell_job_leaves_as_the_wait_ends_is_not_asked(
        make_config: Callable[..., object], node: str, tmp_path: Path) -> None:
    """The job saves 1.1 s, and leaves under ASK_MIN_S (1 s) before the end of its 2 s wait:
    too late for the kernel's request
    (a child started, the kernel's answer waited for), which is not sent. The drain ends with
    its wait, and the veto says the kernel was not asked, not that a cell keeps it busy."""
    script = tmp_path / "ipykernel_launcher.py"
    script.write_text(SPAWNING_KERNEL)
    marker = tmp_path / "signals.log"
    control = socket.create_server(("127.0.0.1", 0))  # the guard's check connects to it
    conn = write_connection(tmp_path / "c.json",
                            {**CONNECTION, "control_port": control.getsockname()[1]})
    kernel = subprocess.Popen(
        [sys.executable, str(script), "-f", conn, HOLDER, "--node", node, "--delay", "1.1",
         "--marker", str(marker), node], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert kernel.stdout is not None
        job_pid = int(kernel.stdout.readline())
        started = time.monotonic()
        report = guard(make_config(drain={"jupyter": "shutdown", "timeout_s": 2}))
        took = time.monotonic() - started
        assert report.verdict.kind == "veto", report.verdict.texts
        (reason,) = [r for r in report.verdict.texts if f"pid {kernel.pid} " in r]
        assert "not asked: no time was left of the wait for a Jupyter shutdown_request" in reason
        assert "busy in a cell" not in reason and "took the shutdown request" not in reason
        assert marker.read_text().splitlines() == [f"{job_pid} SIGINT"]
        assert took < 2 + 2.0, f"the drain took {took:.1f} s of a 2 s wait"
        assert kernel.poll() is None
    finally:
        os.killpg(kernel.pid, signal.SIGKILL)  # the job too: in the kernel's process group
        kernel.wait()
        control.close()


def test_a_connection_file_nested_deeper_than_the_parser_goes_is_no_kernel(
        tmp_path: Path) -> None:
    """JSON nested 30,000 deep fits in a connection file's 64 KiB: Python's parser gives up
    with a RecursionError, which is the answer "not a connection file", not a traceback."""
    deep = tmp_path / "kernel-deep.json"
    deep.write_text("[" * 30000 + "]" * 30000)
    assert read_connection_file(str(deep), os.getuid(), {os.getgid()}) is None

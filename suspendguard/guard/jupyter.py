"""Jupyter kernels (ipykernel): told by identity, named in a veto, asked to shut down.

ipykernel ignores SIGINT while idle, and in a busy cell it is a KeyboardInterrupt: a kernel
never gets the drain signal. The guard vetoes, naming it, or (``[drain] jupyter =
"shutdown"``) sends it the ``shutdown_request`` jupyter_client sends.

A process is a kernel only when its command line runs ipykernel with a connection file AND that
file is a JSON object with the kernel's ports and key. The command line is the process's own to
set; the file is read as its user could: owned by that user (or root), readable by them, a
regular file, the last component not a symbolic link, and small.

Asking it (guard/jupyter_ask.py) is left to the kernel's own interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from suspendguard.guard.python_argv import python_runs
from suspendguard.model import Holder, HolderId, holder_id
from suspendguard.system.procfs import ProcAccessError, ProcFS, user_name

# The ways a kernel spec or a launcher starts ipykernel.
KERNEL_MODULES = ("ipykernel_launcher", "ipykernel", "ipykernel.kernelapp")
KERNEL_SCRIPTS = ("ipykernel_launcher.py",)
IPYTHON = ("IPython", "ipython", "ipython3")  # its "kernel" subcommand starts ipykernel
FILE_OPTIONS = ("-f", "--f", "--IPKernelApp.connection_file")  # -f, and the trait it sets
MAX_CONNECTION_FILE = 64 * 1024  # a connection file is a few hundred bytes
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
# A parent whose command line names one of these runs the kernel for a notebook.
SERVER_WORDS = ("jupyter", "nbclassic", "nbclient", "voila", "papermill")
# The way out of a kernel that holds a device, in a veto's words.
SHUT_DOWN = "shut the kernel down from its notebook (Kernel > Shut Down Kernel)"
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class JupyterKernel:
    """An ipykernel kernel holding a node, as its connection file describes it.

    ``python``: the interpreter that runs the kernel, to run the shutdown request with (its
    command line's first word when that is the file /proc/PID/exe names, so a virtual
    environment's own path is kept; "" when that file was deleted). ``unreachable``: why the
    guard cannot talk to it (it sees other files at the kernel's paths, or another network
    namespace), "" when it can. ``parent``: (pid, name) of the Jupyter server that started it.
    """

    pid: int
    start_time: int
    uid: int
    gid: int
    comm: str
    connection_file: str
    transport: str
    ip: str
    control_port: int
    key: str = field(repr=False)
    signature_scheme: str
    python: str
    parent: tuple[int, str] | None = None
    unreachable: str = ""

    def connection_info(self) -> dict[str, Any]:
        """What the shutdown child gives jupyter_client's ``load_connection_info``."""
        return {"transport": self.transport, "ip": self.ip, "control_port": self.control_port,
                "key": self.key, "signature_scheme": self.signature_scheme}


def kernel_of(holder: Holder, proc: ProcFS) -> JupyterKernel | None:
    """The kernel ``holder`` is, or None when it is not an ipykernel kernel with a valid connection file.

    Everything of /proc/PID is read before the check that PID is still the holder (its start
    time), so nothing kept is another process's."""
    path = connection_file_arg(holder.cmdline)
    if path is None or _forked(holder, proc):
        return None
    try:
        status = proc.status(holder.pid)
    except ProcAccessError:
        return None
    if status is None or status.gid < 0:
        return None
    # A relative path, and an ipc endpoint (files named IP-PORT), are the kernel's folder's.
    cwd = proc.link(holder.pid, "cwd")
    if not path.startswith("/"):
        if not cwd:
            return None
        path = os.path.join(cwd, path)
    info = read_connection_file(proc.path(holder.pid, "root") + path, holder.uid,
                                {status.gid, *status.groups})
    if info is None:
        return None
    transport, ip = info["transport"], info["ip"]
    if transport == "ipc" and not ip.startswith("/"):
        if not cwd:
            return None
        ip = os.path.join(cwd, ip)
    python = _interpreter(holder, proc)
    # The request: the kernel's interpreter, the info read here, to its socket (ipc) or port.
    unreachable = _unreachable(proc, holder.pid, transport, {
        "control socket": f"{ip}-{info['control_port']}" if transport == "ipc" else "",
        "interpreter": python})
    st = proc.stat(holder.pid)
    if st is None or st.start_time != holder.start_time:
        return None  # another process took the pid over: what was read is not this holder's
    return JupyterKernel(
        pid=holder.pid, start_time=holder.start_time, uid=holder.uid, gid=status.gid,
        comm=holder.comm, connection_file=path, transport=transport, ip=ip,
        control_port=info["control_port"], key=info["key"],
        signature_scheme=info["signature_scheme"], python=python,
        parent=_server(proc, holder.ppid), unreachable=unreachable,
    )


def connection_file_arg(cmdline: tuple[str, ...]) -> str | None:
    """The ``-f FILE`` of a command line that runs ipykernel under Python; None otherwise."""
    if len(cmdline) < 2 or "python" not in os.path.basename(cmdline[0]):
        return None
    how, target, rest = python_runs(cmdline[1:])
    name = target if how == "-m" else os.path.basename(target)
    if name in IPYTHON and list(rest[:1]) == ["kernel"]:
        rest = rest[1:]  # ipython kernel -f FILE
    elif not ((how == "-m" and name in KERNEL_MODULES)
              or (how == "script" and name in KERNEL_SCRIPTS)):
        return None
    for j, arg in enumerate(rest):
        if arg in FILE_OPTIONS:
            return rest[j + 1] if j + 1 < len(rest) and rest[j + 1] else None
        for prefix in (f"{option}=" for option in FILE_OPTIONS):
            if arg.startswith(prefix) and len(arg) > len(prefix):
                return arg[len(prefix):]
    return None


def unread_kernel(holder: Holder, proc: ProcFS) -> str:
    """The veto of a process that runs ipykernel, no kernel :func:`kernel_of` could read (its
    connection file gone or unreadable): SIGINT would interrupt its cell all the same; or ""."""
    path = connection_file_arg(holder.cmdline)
    st = proc.stat(holder.pid)
    if path is None or _forked(holder, proc) or st is None or st.start_time != holder.start_time:
        return ""
    return (f"pid {holder.pid} {holder.comm} (user {user_name(holder.uid)}) runs a Jupyter "
            f"kernel (connection file {path}, which the guard could not read as one): it never "
            f"exits on SIGINT (SIGINT only interrupts its running cell); {SHUT_DOWN}")


def _forked(holder: Holder, proc: ProcFS) -> bool:
    """A process a kernel forked (a DataLoader worker) runs its command line: its worker."""
    return holder.ppid > 1 and proc.cmdline(holder.ppid) == holder.cmdline


def read_connection_file(path: str, uid: int, gids: set[int]) -> dict[str, Any] | None:
    """The connection info at ``path`` when user ``uid`` (groups ``gids``) could read it; else None.

    Refused: a file not owned by ``uid`` or root (no one may point the guard at a file of
    another's choosing), a file its user could not read, a symbolic link, anything but a
    regular file, a file over MAX_CONNECTION_FILE bytes, and text that is not a connection file.
    """
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONNECTION_FILE
                or not _readable_by(st, uid, gids)):
            return None
        data = os.read(fd, MAX_CONNECTION_FILE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return _connection_info(json.loads(data)) if len(data) <= MAX_CONNECTION_FILE else None
    except (ValueError, RecursionError):  # not JSON, or nested deeper than a parser goes
        return None


def _readable_by(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    if st.st_uid not in (uid, 0):
        return False
    bit = stat.S_IRUSR if st.st_uid == uid else stat.S_IRGRP if st.st_gid in gids else stat.S_IROTH
    return uid == 0 or bool(st.st_mode & bit)


def _connection_info(value: Any) -> dict[str, Any] | None:
    """The fields the guard uses, when ``value`` is a kernel's connection file."""
    if not isinstance(value, dict):
        return None
    for port in PORTS:
        number = value.get(port)
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
            return None
    key = value.get("key")
    transport = value.get("transport", "tcp")
    ip = value.get("ip", "127.0.0.1")
    scheme = value.get("signature_scheme", "hmac-sha256")
    if (not isinstance(key, str) or transport not in ("tcp", "ipc") or not isinstance(ip, str)
            or not ip or not isinstance(scheme, str) or not scheme.startswith("hmac-")
            or (transport == "tcp" and not (ip.isascii() and ip.isprintable()))):
        return None
    return {"transport": transport, "ip": ip, "control_port": value["control_port"],
            "key": key, "signature_scheme": scheme}


def _interpreter(holder: Holder, proc: ProcFS) -> str:
    """The kernel's interpreter: argv[0] when it is the very file of /proc/PID/exe, else that file.

    /proc/PID/exe has the symbolic links resolved: a virtual environment's bin/python reads as
    the base interpreter, which would not find the environment's packages. ``holder.exe`` is
    the link as the scan read it.
    """
    if not holder.exe or holder.exe.endswith(" (deleted)"):
        return ""
    first = holder.cmdline[0] if holder.cmdline else ""
    with contextlib.suppress(OSError):
        if first.startswith("/") and os.path.samestat(os.stat(proc.path(holder.pid, "exe")),
                                                      os.stat(first)):
            return first
    return holder.exe


def _server(proc: ProcFS, ppid: int) -> tuple[int, str] | None:
    """(pid, name) of the kernel's parent when that is a Jupyter server or kernel manager: its
    comm (``jupyter-lab``), or an interpreter's word that names Jupyter (``jupyterlab``)."""
    if ppid <= 1:
        return None
    st = proc.stat(ppid)
    if st is None:
        return None
    if _names_jupyter(st.comm):
        return ppid, st.comm
    for word in proc.cmdline(ppid)[:3]:
        if _names_jupyter(word):
            name = os.path.basename(word)
            return ppid, name if name and len(name) <= 64 and not any(
                c.isspace() for c in name) else st.comm
    return None


def _names_jupyter(word: str) -> bool:
    return any(s in word.lower() for s in SERVER_WORDS)


def _unreachable(proc: ProcFS, pid: int, transport: str, files: dict[str, str]) -> str:
    """Why a child of the guard could not reach the kernel, "" when it can: it sees ``files``
    (what: the kernel's path, or "") as the kernel does (ProtectSystem= is fine); tcp: netns."""
    for what, path in ((w, p) for w, p in files.items() if p):
        theirs = proc.path(pid, "exe") if what == "interpreter" else proc.path(pid, "root") + path
        if not _same_file(theirs, path):
            return (f"the guard does not see its {what} {path} as the kernel does (it runs in "
                    "another mount namespace: a container?)")
    if transport != "tcp":
        return ""
    try:
        ours, theirs = (os.readlink(proc.path(p, "ns", "net")) for p in ("self", pid))
    except OSError:
        return "its network namespace cannot be read"
    return "it runs in another network namespace (a container?)" if theirs != ours else ""


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except OSError:
        return False


def describe(kernel: JupyterKernel, cannot: str = "") -> str:
    """The veto's reason: which kernel, why the drain signal cannot stop it, what to do;
    ``cannot``: why ``[drain] jupyter = "shutdown"`` cannot ask it either (``jupyter_ask.cannot_ask``)."""
    server = f", server pid {kernel.parent[0]} {kernel.parent[1]}" if kernel.parent else ""
    way = (f'and the guard cannot ask it to shut down ([drain] jupyter = "shutdown"): {cannot}; '
           f"{SHUT_DOWN}" if cannot else f'{SHUT_DOWN}, or set [drain] jupyter = "shutdown"')
    return (f"pid {kernel.pid} {kernel.comm} (user {user_name(kernel.uid)}) is a Jupyter kernel "
            f"(connection file {kernel.connection_file}{server}): it never exits on SIGINT "
            f"(SIGINT only interrupts its running cell){',' if cannot else ';'} {way}")


def started_by(kernel: Holder, holders: Iterable[Holder], proc: ProcFS,
               depth: int = 16) -> frozenset[HolderId]:
    """The holders below ``kernel`` (its cells' processes): ipykernel's shutdown SIGTERMs its
    process group's children at once, so its shutdown request waits until these have left."""
    below = set()
    for h in holders:
        pid, since = h.ppid, h.start_time
        for _ in range(depth):
            if pid == kernel.pid or pid <= 1:
                break
            try:
                st = proc.stat(pid)
            except ProcAccessError:
                st = None
            if st is None or st.start_time > since:
                pid = 0  # gone, or its pid reused by a later process: not the kernel's
                break
            pid, since = st.ppid, st.start_time
        if pid == kernel.pid and h.pid != kernel.pid and kernel.start_time <= since:
            below.add(holder_id(h))
    return frozenset(below)

"""Asking a Jupyter kernel to shut down: whether the guard can, and the request itself.

The request is sent by a child running the kernel's own interpreter as its user and group (no
supplementary groups), with jupyter_client's BlockingKernelClient (ipykernel depends on it), as
a notebook server frames and signs it: the guard needs neither pyzmq nor jupyter_client, and
never runs a user's interpreter as root. The child is killed at the timeout.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from ipaddress import ip_address
from typing import Any

from suspendguard.guard.jobs import Plan
from suspendguard.guard.jupyter import JupyterKernel, describe
from suspendguard.model import Decision, Holder
from suspendguard.system import runner
from suspendguard.system.procfs import ProcAccessError, ProcFS, Stat

CONNECT_S = 0.5  # made or refused at once on this host; one the IP filter drops waits this long


def cannot_ask(kernel: JupyterKernel) -> str:
    """Why the guard cannot ask ``kernel`` to shut down, known before anyone is signalled; or ""."""
    if cannot := _cannot_run(kernel):
        return cannot
    return _port_refused(kernel.ip, kernel.control_port) if kernel.transport == "tcp" else ""


def busy_cells(decisions: Sequence[Decision], plan_of: Callable[[Sequence[Decision]], Plan],
               kernel_of: Callable[[Holder], JupyterKernel | None], proc: ProcFS
               ) -> list[Decision]:
    """``decisions``, each kernel to be asked whose cell runs (it catches SIGINT only then)
    vetoed before anyone is signalled where that cell started processes in the kernel's group
    that the drain does not stop first: ipykernel's shutdown SIGTERMs them at once, while the
    cell still runs (a DataLoader's forked workers), and the cell loses its work."""
    busy = [d for d in decisions if d.kind == "jupyter-shutdown" and d.holder.sigint == "caught"]
    if not busy:
        return list(decisions)
    plan = plan_of(decisions)
    stats = {pid: st for pid in proc.pids() if (st := _stat(proc, pid)) is not None}
    # The jobs the drain stops before it asks (a kernel's workers are not), and the
    # processes between them and the kernel (a shell a cell ran them through).
    first = set()
    for d in decisions:
        pid = d.holder.pid
        if d.signals and d.kind != "jupyter-shutdown" and (plan.role(d.holder) or ("",))[0] != "worker":
            while pid in stats and pid > 1 and pid not in first:
                first.add(pid)
                pid = stats[pid].ppid
    out = []
    for d in decisions:
        at_risk = _started_in_group(d.holder, stats, first) if d in busy else []
        kernel = kernel_of(d.holder) if at_risk else None
        out.append(d if kernel is None else replace(d, kind="veto-jupyter", reason=describe(
            kernel, f"its cell runs, and a shutdown would SIGTERM at once what the cell started in "
            f"its process group (pid {', '.join(map(str, at_risk))}), mid-cell")))
    return out


def _started_in_group(kernel: Holder, stats: dict[int, Stat], first: set[int]) -> list[int]:
    """The kernel's children in its process group, but those the drain stops first."""
    own = stats.get(kernel.pid)
    if own is None or own.start_time != kernel.start_time:  # gone, or its pid taken since
        return []
    return sorted(pid for pid, st in stats.items()
                  if st.ppid == kernel.pid and st.pgrp == own.pgrp and pid not in first)


def _stat(proc: ProcFS, pid: int) -> Stat | None:
    try:
        return proc.stat(pid)
    except ProcAccessError:
        return None


def _cannot_run(kernel: JupyterKernel) -> str:
    """Why the request's child cannot run for ``kernel``, as the kernel was read; or ""."""
    if kernel.unreachable:
        return kernel.unreachable
    if not kernel.python:
        return "its interpreter was deleted (upgraded?)"
    if os.geteuid() not in (0, kernel.uid):
        return f"it runs as uid {kernel.uid}; only root or that user can ask it to shut down"
    return ""


def _port_refused(ip: str, port: int) -> str:
    """Why the guard cannot connect to a tcp kernel's control port ("" when it can: closed at
    once, nothing sent): the installed unit reaches loopback only (``IPAddressAllow=``), where
    a connection elsewhere is dropped, and the wait for it ends at ``CONNECT_S``."""
    try:
        family = socket.AF_INET6 if ip_address(ip).version == 6 else socket.AF_INET
    except ValueError:  # a name (localhost): looking it up is left to the request
        return ""
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:  # this process may open none (the watch unit: AF_UNIX): not known here
        return ""
    with sock:
        sock.settimeout(CONNECT_S)
        try:
            sock.connect((ip, port))
        except OSError as exc:
            return f"its control port {ip}:{port} cannot be reached from the guard ({exc.strerror or exc})"
    return ""


# Run by the kernel's own interpreter, as the kernel's user, from /: reads
# {"connection": ..., "until": CLOCK_MONOTONIC seconds} on stdin and prints
# one JSON line. CLOCK_MONOTONIC is one clock for every process of the host,
# so the child waits for the reply only as long as the guard waits for it.
SHUTDOWN_SCRIPT = """\
import json, sys, time
order = json.loads(sys.stdin.read())
try:
    from jupyter_client.blocking import BlockingKernelClient
except Exception as exc:
    print(json.dumps({"error": "cannot import jupyter_client: %s" % exc}))
    sys.exit(0)
client = BlockingKernelClient()
client.load_connection_info(order["connection"])
client.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
try:
    wait = max(order["until"] - time.monotonic(), 0.05)
    try:
        reply = client.shutdown(restart=False, reply=True, timeout=wait)
    except Exception as exc:
        print(json.dumps({"error": "no shutdown_reply within %.1f s (%s)" % (wait, type(exc).__name__)}))
    else:
        print(json.dumps({"status": reply.get("content", {}).get("status", "")}))
finally:
    client.stop_channels()
"""
# What the child keeps for itself of the timeout: starting the interpreter
# and its exit after the reply came.
CHILD_MARGIN_S = 0.5


def request_shutdown(kernel: JupyterKernel, timeout_s: float) -> str | None:
    """Ask ``kernel`` to shut down (``shutdown_request``, restart false) on its control channel.

    None once the kernel acknowledged it (its ``shutdown_reply``); else one line saying why not.
    The kernel is never signalled: a kernel busy in a cell acknowledges at once but exits only
    when the cell ends, which the caller waits for.
    """
    label = f"Jupyter kernel pid {kernel.pid}"
    if cannot := _cannot_run(kernel):  # its port was tried before the drain (cannot_ask)
        return f"{label}: {cannot}"
    as_user = (kernel.uid, kernel.gid) if os.geteuid() == 0 else None
    try:
        home = pwd.getpwuid(kernel.uid).pw_dir
    except KeyError:
        home = "/"
    env = {"PATH": runner.DEFAULT_PATH, "LANG": "C.UTF-8", "HOME": home}
    order = {"connection": kernel.connection_info(),
             "until": time.monotonic() + max(timeout_s - CHILD_MARGIN_S, 0.1)}
    # -E: no PYTHON* variable of the guard's reaches the child; "/" is its
    # folder, so no module in the guard's folder shadows jupyter_client.
    result = runner.run([kernel.python, "-E", "-c", f"import os; os.chdir('/')\n{SHUTDOWN_SCRIPT}"],
                        timeout=timeout_s, env=env, stdin=json.dumps(order), as_user=as_user)
    if not result.ok:
        why = result.describe_failure()
        if result.error == "permission denied" and as_user is not None:
            why += " (switching to the kernel's user needs CAP_SETUID and CAP_SETGID)"
        return f"{label}: {why}"
    answer = _answer(result.stdout)
    if answer is None:
        tail = result.stdout.strip().splitlines()[-1][:200] if result.stdout.strip() else "nothing"
        return f"{label}: no answer from the shutdown request (printed {tail!r})"
    if "error" in answer:
        return f"{label}: {answer['error']}"
    if answer.get("status") != "ok":
        return f"{label}: the kernel answered the shutdown request with status {answer.get('status')!r}"
    return None


def _answer(stdout: str) -> dict[str, Any] | None:
    try:
        value = json.loads(next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")),
                                ""))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

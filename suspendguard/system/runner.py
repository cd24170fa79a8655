"""The one place that starts other programs.

Children are started in their own session so a timeout kills the whole
group, and their pids are registered while a call waits for them so the
holder scan never reports the guard's own probes. One killed that does not
go (stuck in a driver call) is given up on and kept apart (``abandoned``):
the scan sees it again, and the run says why it cannot suspend.
"""

from __future__ import annotations

import contextlib
import locale
import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from suspendguard.system import deadline

# The PATH of a child that gets none of the caller's: slurmctld and slurmd run their
# programs with none, and a child run as a user gets a clean environment.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The pids of the children started here while a call here waits for them: the scan leaves
# them out, since each ends (or is killed) within its call's timeout.
_children_lock = threading.Lock()
_children: set[int] = set()


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A child killed at its timeout that had not exited a moment later (stuck in the kernel)."""

    pid: int
    command: str  # what it is, in words (the ``name`` it was run with, else its program)
    since: float  # when it was given up on (time.monotonic())


# Children killed at their timeout that did not go (see KILLED_GRACE_S), each with what it
# says of itself, until they are reaped here.
_abandoned: list[tuple[subprocess.Popen[Any], Abandoned]] = []


def active_children() -> frozenset[int]:
    """The guard's own children (probes) a call here is waiting for now.

    Not those killed and given up on (:func:`abandoned`): such a child is
    stuck in a driver call that does not return, and holds what it holds
    as long as any job would; the scan must see it.
    """
    with _children_lock:
        return frozenset(_children)


def abandoned() -> tuple[Abandoned, ...]:
    """The children killed at their timeout that are still there; those gone are reaped now."""
    with _children_lock:
        for entry in list(_abandoned):
            if entry[0].poll() is not None:  # reaped here: its pid is free for others now
                _abandoned.remove(entry)
        return tuple(said for _, said in _abandoned)


def _started(pid: int) -> None:
    with _children_lock:
        _children.add(pid)


def _ended(pid: int) -> None:
    with _children_lock:
        _children.discard(pid)


@dataclass(frozen=True, slots=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: did not run or was killed at the timeout
    stdout: str
    stderr: str
    timed_out: bool = False
    error: str = ""  # why it could not start
    truncated: bool = False  # stopped (killed) once its output passed the bound

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.error

    def describe_failure(self) -> str:
        cmd = self.argv[0] if self.argv else "?"
        if self.error:
            return f"{cmd}: {self.error}"
        if self.timed_out:
            return f"{cmd}: no answer within the timeout (killed)"
        if self.truncated:
            return f"{cmd}: more output than is kept (killed)"
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = str(-self.returncode)
            return f"{cmd}: killed by {name}"
        err = self.stderr.strip().splitlines()
        tail = f": {err[-1][:200]}" if err else ""
        return f"{cmd}: exit status {self.returncode}{tail}"


# What is kept of a run's stdout: far past any answer of a tool run here. A child that writes
# without end (a wedged tool printing errors in a loop) is killed there, not kept in memory.
MAX_OUTPUT = 16 * 1024 * 1024


def run(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    as_user: tuple[int, int] | None = None,
    name: str = "",
) -> RunResult:
    """Run ``argv`` with a hard timeout; never raises for a missing or failing tool.

    ``as_user`` (uid, gid): the child drops to that user, with no
    supplementary groups, before it executes (needs CAP_SETUID, CAP_SETGID).
    Its output is read as a text-mode pipe reads it; past MAX_OUTPUT bytes of
    stdout the child is killed and ``truncated`` set, as by :func:`run_bounded`.
    ``name``: what the child is, in words, should it not go when killed (:func:`abandoned`);
    its program's name by default.
    """
    args = tuple(argv)
    proc = _spawn(
        args,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        user=as_user[0] if as_user else None,
        group=as_user[1] if as_user else None,
        extra_groups=[] if as_user else None,
    )
    if isinstance(proc, RunResult):
        return proc
    bound = deadline.current()
    coding = locale.getpreferredencoding(False)  # subprocess's text mode's, on 3.10 and 3.11
    sent = None if stdin is None else stdin.encode(coding, "replace")
    out, err, timed_out, truncated = _collect(proc, bound.cap(timeout), MAX_OUTPUT, sent, bound,
                                                name or os.path.basename(args[0]))
    said, complained = _text(out, coding), _text(err, coding)
    if timed_out and bound.cancelled:
        return RunResult(args, None, said, complained, error=bound.cancel_reason)
    code = None if timed_out or truncated else proc.returncode
    return RunResult(args, code, said, complained, timed_out=timed_out, truncated=truncated)


def _text(data: bytes, coding: str) -> str:
    """``data`` as a text-mode pipe reads it: bad bytes replaced, universal newlines."""
    return data.decode(coding, "replace").replace("\r\n", "\n").replace("\r", "\n")


# How long a child killed at its timeout may take to go and close its output.
# One stuck in the driver (state D) dies only once its call returns, and a
# process it started in a session of its own keeps the pipes open: neither
# may hold up the guard, whose timeout would mean nothing then.
KILLED_GRACE_S = 1.0


def _abandon(proc: subprocess.Popen[Any], name: str) -> None:
    """Give up on a killed child: its pipes are closed, and it is kept (``abandoned``) until
    reaped, no longer left out of the scan."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    with _children_lock:
        _children.discard(proc.pid)
        _abandoned.append((proc, Abandoned(proc.pid, name, time.monotonic())))


# How often the wait for a child whose output closed looks whether the guard was cancelled.
CANCEL_POLL_S = 0.05

# What is kept of a bounded command's stderr: enough for its last lines.
STDERR_KEEP = 64 * 1024


def run_bounded(argv: Sequence[str], timeout: float, max_output: int) -> RunResult:
    """Run ``argv``, keeping at most ``max_output`` bytes of its stdout.

    For commands whose output has no bound of its own (a journal): once more
    than ``max_output`` bytes came, the command is killed and ``truncated``
    set, with ``stdout`` cut after its last whole line. The output is decoded
    as UTF-8 (bad bytes replaced) without newline translation.
    """
    args = tuple(argv)
    proc = _spawn(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, start_new_session=True)
    if isinstance(proc, RunResult):
        return proc
    out, err, timed_out, truncated = _collect(proc, timeout, max_output,
                                                name=os.path.basename(args[0]))
    code = None if timed_out or truncated else proc.returncode
    return RunResult(args, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     timed_out=timed_out, truncated=truncated)


def _collect(proc: subprocess.Popen[bytes], timeout: float, max_output: int,
             stdin: bytes | None = None, bound: deadline.Deadline = deadline.UNBOUNDED,
             name: str = "") -> tuple[bytes, bytes, bool, bool]:
    """(stdout, stderr, timed out, truncated) of a started child, which is gone after (or,
    killed and not going, given up on). ``bound``'s cancel ends it as the timeout does."""
    _started(proc.pid)
    until = time.monotonic() + max(timeout, 0.001)
    out = err = b""
    finished = truncated = False
    try:
        out, err, truncated = _read_bounded(proc, until, max_output, stdin, bound.cancel_fd)
        finished = not truncated and _exited(proc, until, bound)
    finally:
        if not finished:  # timed out, cancelled, truncated, or an error here: killed
            _kill_group(proc.pid)
        try:
            proc.wait(timeout=KILLED_GRACE_S)
        except subprocess.TimeoutExpired:
            _abandon(proc, name or "a command")
        else:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            _ended(proc.pid)
    if truncated:
        out = out[:max_output]
        out = out[:out.rfind(b"\n") + 1]
    return out, err, not (finished or truncated), truncated


def _exited(proc: subprocess.Popen[bytes], until: float, bound: deadline.Deadline) -> bool:
    """Whether a child whose output closed exits by ``until``, before the guard is cancelled."""
    while not bound.cancelled:
        left = until - time.monotonic()
        if left <= 0:
            return False
        try:
            proc.wait(timeout=min(left, CANCEL_POLL_S))
            return True
        except subprocess.TimeoutExpired:
            continue
    return False


def _read_bounded(proc: subprocess.Popen[bytes], until: float, max_output: int,
                  stdin: bytes | None = None, cancel_fd: int | None = None
                  ) -> tuple[bytes, bytes, bool]:
    """stdout and stderr (``stdin`` written meanwhile) until both close, ``until`` passes,
    ``cancel_fd`` can be read or stdout passes its bound: (stdout, stderr, truncated)."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    pending = memoryview(stdin or b"")
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        if proc.stdin is not None:
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        if cancel_fd is not None:
            sel.register(cancel_fd, selectors.EVENT_READ)
        reading = 2
        while reading:
            left = until - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), False
            for key, _ in sel.select(left):
                if key.fd == cancel_fd:
                    return bytes(out), bytes(err), False
                if key.fileobj is proc.stdin:
                    try:  # a pipe that can be written takes PIPE_BUF bytes without blocking
                        pending = pending[os.write(key.fd, pending[:select.PIPE_BUF]):]
                    except BrokenPipeError:  # the child reads no more of it
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(proc.stdin)
                        with contextlib.suppress(BrokenPipeError):
                            proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 1024 * 1024)
                if not chunk:
                    sel.unregister(key.fileobj)
                    reading -= 1
                    continue
                key.data.extend(chunk)
                if key.data is err and len(err) > STDERR_KEEP:
                    del err[:len(err) - STDERR_KEEP]
                if len(out) > max_output:
                    return bytes(out), bytes(err), True
    return bytes(out), bytes(err), False


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _spawn(args: tuple[str, ...], **popen: Any) -> subprocess.Popen[Any] | RunResult:
    """The started child, or the RunResult that says why it could not start."""
    try:
        return subprocess.Popen(args, **popen)
    except FileNotFoundError:
        return RunResult(args, None, "", "", error="command not found")
    except PermissionError:
        return RunResult(args, None, "", "", error="permission denied")
    except OSError as exc:
        return RunResult(args, None, "", "", error=exc.strerror or str(exc))


class Background:
    """A child that runs beside the guard (a watchdog), not waited for by a call here."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it ended within ``timeout`` seconds, else None."""
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def start_background(argv: Sequence[str], pass_fds: Sequence[int]) -> Background:
    """Start ``argv`` in a session of its own with ``pass_fds`` open; OSError when it cannot start.

    Its stdin and outputs are /dev/null. It outlives the guard if the guard
    is killed first: that is what it is for.
    """
    proc = subprocess.Popen(list(argv), pass_fds=tuple(pass_fds), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    return Background(proc)

"""The one place that starts other programs.

Children are started in their own session so a timeout kills the whole
group, and their pids are registered while they run so the holder scan
never reports the guard's own probes.
"""

from __future__ import annotations

import contextlib
import os
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

# The pids of the children started here, while they run: the scan leaves them out.
_children_lock = threading.Lock()
_children: set[int] = set()
# Children killed at their timeout that did not go (see KILLED_GRACE_S): still
# the guard's own, and left out of the scan until they are reaped here.
_abandoned: list[subprocess.Popen[Any]] = []


def active_children() -> frozenset[int]:
    """The guard's own children (probes) running now."""
    with _children_lock:
        for proc in list(_abandoned):
            if proc.poll() is not None:  # reaped here: its pid is free for others now
                _abandoned.remove(proc)
                _children.discard(proc.pid)
        return frozenset(_children)


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
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = str(-self.returncode)
            return f"{cmd}: killed by {name}"
        err = self.stderr.strip().splitlines()
        tail = f": {err[-1][:200]}" if err else ""
        return f"{cmd}: exit status {self.returncode}{tail}"


def run(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    as_user: tuple[int, int] | None = None,
) -> RunResult:
    """Run ``argv`` with a hard timeout; never raises for a missing or failing tool.

    ``as_user`` (uid, gid): the child drops to that user, with no
    supplementary groups, before it executes (needs CAP_SETUID, CAP_SETGID).
    """
    args = tuple(argv)
    proc = _spawn(
        args,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        text=True,
        errors="replace",
        user=as_user[0] if as_user else None,
        group=as_user[1] if as_user else None,
        extra_groups=[] if as_user else None,
    )
    if isinstance(proc, RunResult):
        return proc
    _started(proc.pid)
    try:
        out, err = _communicate(proc, stdin, timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = _killed_output(proc)
        if deadline.cancelled():
            return RunResult(args, None, out, err, error=deadline.current().cancel_reason)
        return RunResult(args, None, out, err, timed_out=True)
    except BaseException:
        _ended(proc.pid)
        raise
    _ended(proc.pid)
    return RunResult(args, proc.returncode, out, err)


# How long a child killed at its timeout may take to go and close its output.
# One stuck in the driver (state D) dies only once its call returns, and a
# process it started in a session of its own keeps the pipes open: neither
# may hold up the guard, whose timeout would mean nothing then.
KILLED_GRACE_S = 1.0


def _killed_output(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """What a killed child wrote, once it is gone; nothing if it does not go in time."""
    try:
        out, err = proc.communicate(timeout=KILLED_GRACE_S)
    except subprocess.TimeoutExpired:
        _abandon(proc)
        return "", ""
    _ended(proc.pid)
    return out, err


def _abandon(proc: subprocess.Popen[Any]) -> None:
    """Give up on a killed child: its pipes are closed, and it stays the guard's until reaped."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    with _children_lock:
        _abandoned.append(proc)


# How often a child's wait looks whether the guard was cancelled.
CANCEL_POLL_S = 0.05


def _communicate(proc: subprocess.Popen[str], stdin: str | None,
                 timeout: float) -> tuple[str, str]:
    """The child's output; TimeoutExpired past ``timeout``, the guard's deadline or its cancel."""
    bound = deadline.current()
    until = time.monotonic() + max(bound.cap(timeout), 0.001)
    if bound.cancel is None:
        return proc.communicate(stdin, timeout=until - time.monotonic())
    first = True
    while True:
        left = until - time.monotonic()
        if bound.cancelled or left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        try:
            # communicate() may be called again after a timeout: no output is lost.
            return proc.communicate(stdin if first else None, timeout=min(left, CANCEL_POLL_S))
        except subprocess.TimeoutExpired:
            first = False


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
    _started(proc.pid)
    timed_out = truncated = True  # until it is read to the end: killed on the way out
    try:
        out, err, timed_out, truncated = _read_bounded(proc, timeout, max_output)
    finally:
        if not (timed_out or truncated):
            try:
                proc.wait(timeout=1.0)  # its output closed: it is exiting
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out or truncated:
            _kill_group(proc.pid)
        try:
            proc.wait(timeout=KILLED_GRACE_S)
        except subprocess.TimeoutExpired:
            _abandon(proc)
        else:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            _ended(proc.pid)
    if truncated:
        out = out[:max_output]
        out = out[:out.rfind(b"\n") + 1]
    code = None if timed_out or truncated else proc.returncode
    return RunResult(args, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     timed_out=timed_out, truncated=truncated)


def _read_bounded(proc: subprocess.Popen[bytes], timeout: float, max_output: int
                  ) -> tuple[bytes, bytes, bool, bool]:
    """stdout and stderr until both close, the timeout passes or stdout passes its bound."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + max(timeout, 0.001)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), True, False
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1024 * 1024)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is err and len(err) > STDERR_KEEP:
                    del err[:len(err) - STDERR_KEEP]
                if len(out) > max_output:
                    return bytes(out), bytes(err), False, True
    return bytes(out), bytes(err), False, False


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

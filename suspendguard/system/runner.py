"""The one place that starts other programs.

Children are started in their own session so a timeout kills the whole
group, and their pids are registered while they run so the holder scan
never reports the guard's own probes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from suspendguard.system import children


@dataclass(frozen=True, slots=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: did not run or was killed at the timeout
    stdout: str
    stderr: str
    timed_out: bool = False
    error: str = ""  # why it could not start

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
) -> RunResult:
    """Run ``argv`` with a hard timeout; never raises for a missing or failing tool."""
    args = tuple(argv)
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except FileNotFoundError:
        return RunResult(args, None, "", "", error="command not found")
    except PermissionError:
        return RunResult(args, None, "", "", error="permission denied")
    except OSError as exc:
        return RunResult(args, None, "", "", error=exc.strerror or str(exc))
    children.add(proc.pid)
    try:
        try:
            out, err = proc.communicate(stdin, timeout=max(timeout, 0.001))
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            return RunResult(args, None, out, err, timed_out=True)
        return RunResult(args, proc.returncode, out, err)
    finally:
        children.discard(proc.pid)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)

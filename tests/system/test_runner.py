"""The one place that starts other programs: its timeout holds whatever the program leaves behind."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
from pathlib import Path

from helpers.wait import wait_for

from suspendguard.system import runner

# A tool that starts a process in a session of its own (out of the group the
# timeout kills) which keeps the tool's output open, then hangs itself.
ESCAPING_TOOL = textwrap.dedent("""
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(600)
        os._exit(0)
    print("partial answer", flush=True)
    time.sleep(600)
""")


def _escaped_pid(pid_file: Path) -> int:
    """The escaped process's pid; never 0, which os.kill would read as this process group."""
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=10.0,
                       message=f"the tool never wrote {pid_file}: it did not fork in time"))
    assert pid > 1
    return pid


def test_timeout_holds_when_a_process_the_tool_started_keeps_its_output_open(tmp_path: Path) -> None:
    pid_file = tmp_path / "escaped.pid"
    results: list[runner.RunResult] = []
    call = threading.Thread(target=lambda: results.append(
        # 2 s: time for the tool's interpreter to start and fork on a loaded machine
        runner.run([sys.executable, "-c", ESCAPING_TOOL, str(pid_file)], 2.0)), daemon=True)
    call.start()
    escaped = _escaped_pid(pid_file)
    try:
        call.join(30.0)
        assert not call.is_alive(), "the run waited on the escaped process's pipe past its timeout"
        [result] = results
        assert result.timed_out and result.returncode is None and not result.ok
        assert "no answer within the timeout (killed)" in result.describe_failure()
        os.kill(escaped, 0)  # still running: only its pipe was given up, not the wait's bound
        # the killed tool itself is reaped and no longer counted as the guard's own child
        assert wait_for(lambda: not runner.active_children(), timeout=10.0)
    finally:
        os.kill(escaped, signal.SIGKILL)
        call.join(10.0)


def test_a_bounded_run_still_reads_a_tool_that_ends_on_time() -> None:
    result = runner.run([sys.executable, "-c", "print('answer')"], 10.0)
    assert result.ok and result.stdout == "answer\n"
    assert not runner.active_children()


def test_a_run_keeps_a_bounded_part_of_an_output_without_end() -> None:
    # A child writing without end until its timeout (a wedged tool printing errors in a loop)
    # was kept whole in memory, at pipe speed: gigabytes within a tool's timeout.
    result = runner.run(["yes"], 1.0)
    assert result.truncated and not result.timed_out and result.returncode is None
    assert 0 < len(result.stdout) <= runner.MAX_OUTPUT and result.stdout.endswith("y\n")
    assert set(result.stdout.split("\n")) == {"y", ""}  # cut after its last whole line
    assert result.describe_failure() == "yes: more output than is kept (killed)"
    assert not runner.active_children()


def test_a_run_writes_its_input_while_it_reads_the_output() -> None:
    # More input than a pipe holds, echoed back as it is read: written all at once before
    # the output was read, the child and the guard would each wait on the other.
    text = "ä line\r\n" * 40_000
    result = runner.run(["cat"], 10.0, stdin=text)
    assert result.ok and result.stdout == "ä line\n" * 40_000  # as a text-mode pipe reads it
    assert not runner.active_children()

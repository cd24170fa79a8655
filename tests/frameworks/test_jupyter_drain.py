"""Real Jupyter kernels before a suspend: never sent SIGINT, named in a veto at once, or shut down.

ipykernel ignores SIGINT while idle and turns it into KeyboardInterrupt in
the running cell while busy; the kernel never exits on it. The guard
vetoes naming the kernel before anyone is signalled, or, with
``[drain] jupyter = "shutdown"``, asks the kernel to shut down on its own
control channel and waits for its exit. The cell's own progress file says
whether anything interrupted it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers import TESTS
from helpers.kernels import Kernel
from helpers.runners import cli
from helpers.wait import wait_for

CELL_JOB = TESTS / "helpers" / "cell_job.py"


def config(tmp_path: Path, node: str, jupyter: str = "veto") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n[idle]\nbackends = []\n'
                    f'[drain]\ntimeout_s = 20\njupyter = "{jupyter}"\n')
    return path


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_a_kernel_vetoes_at_once_and_its_cell_runs_on(kernel: Kernel, tmp_path: Path, node: str,
                                                      busy: bool) -> None:
    progress = tmp_path / "progress"
    steps = 40
    if busy:
        kernel.command(f"busy {progress} {steps}")
    conf = config(tmp_path, node)
    _code, out, _err = cli("--config", str(conf), "check", "--json")
    predicted = json.loads(out)
    assert predicted["verdict"] == "veto"
    started = time.monotonic()
    code, out, err = cli("--config", str(conf), "drain", "--yes", "--json")
    took = time.monotonic() - started
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "veto", (report, err)
    assert took < 8.0, f"the veto took {took:.1f} s"  # at once, not after [drain] timeout_s (20)
    reason = report["reasons"][0]
    assert reason == predicted["reasons"][0]
    assert f"pid {kernel.pid} " in reason and "is a Jupyter kernel" in reason
    assert kernel.connection_file in reason and "Kernel > Shut Down Kernel" in reason
    assert "timeout_s" not in reason and "start it so it takes" not in reason
    (held,) = [h for h in report["holders"] if h["pid"] == kernel.pid]
    assert held["outcome"]["kind"] == "not-signalled"
    assert kernel.alive()
    if busy:
        assert kernel.wait_exit(0.1) is None
        wait_for(lambda: "done" in progress.read_text(), steps * 0.1 + 10, interval=0.1)
        lines = progress.read_text().splitlines()
        assert lines == [str(i) for i in range(steps)] + ["done"], lines  # never interrupted


def test_a_kernel_whose_connection_file_is_gone_is_still_never_interrupted(
        kernel: Kernel, tmp_path: Path, node: str) -> None:
    # The runtime folder was cleaned (a logout's /run/user, a tmp cleaner): no file to read
    # the kernel by. SIGINT would still abort its running cell, then time out.
    progress = tmp_path / "progress"
    steps = 30
    kernel.command(f"busy {progress} {steps}")
    Path(kernel.connection_file).unlink()
    code, out, err = cli("--config", str(config(tmp_path, node)), "drain", "--yes", "--json")
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "veto", (report, err)
    [reason] = report["reason_details"]
    assert reason["code"] == "jupyter-kernel", reason
    assert f"pid {kernel.pid} " in reason["text"] and "runs a Jupyter kernel" in reason["text"]
    assert kernel.connection_file in reason["text"]
    (held,) = [h for h in report["holders"] if h["pid"] == kernel.pid]
    assert held["outcome"]["kind"] == "not-signalled"
    wait_for(lambda: "done" in progress.read_text(), steps * 0.1 + 10, interval=0.1)
    assert progress.read_text().splitlines() == [str(i) for i in range(steps)] + ["done"]
    assert kernel.alive()


def test_shutdown_ends_the_kernel_and_allows(kernel: Kernel, tmp_path: Path, node: str) -> None:
    conf = config(tmp_path, node, "shutdown")
    _code, out, _err = cli("--config", str(conf), "check", "--json")
    (predicted,) = [h for h in json.loads(out)["holders"] if h["pid"] == kernel.pid]
    assert "asked to shut down" in predicted["outcome"]["why"]
    assert kernel.alive()  # check sends nothing
    code, out, err = cli("--config", str(conf), "drain", "--yes", "--json")
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "allow", (report, err)
    (held,) = [h for h in report["holders"] if h["pid"] == kernel.pid]
    assert held["outcome"]["kind"] == "exited"
    assert "shutdown_request" in held["outcome"]["why"]
    assert kernel.wait_exit(5) == 0  # it left on its own, status 0: no signal ended it
    _code, out, _err = cli("--config", str(conf), "history", "--json")
    assert "shutdown_request" in out  # the history records how it was stopped


def test_a_job_a_cell_started_saves_before_the_kernel_is_shut_down(
        kernel: Kernel, tmp_path: Path, node: str) -> None:
    """A cell's subprocess in the kernel's process group holds the node and saves on SIGINT.
    ipykernel's shutdown SIGTERMs such children at once: the guard sends the kernel its
    shutdown request only once the job has left, so the job gets SIGINT alone and saves."""
    out = tmp_path / "job"
    out.mkdir()
    kernel.command(f"spawn {CELL_JOB} {node} {out}")
    conf = config(tmp_path, node, "shutdown")
    code, text, err = cli("--config", str(conf), "drain", "--yes", "--json")
    report = json.loads(text)
    signals = (out / "signals").read_text().splitlines() if (out / "signals").exists() else []
    assert code == 0 and report["verdict"] == "allow", (report, err, signals)
    assert signals == ["SIGINT"]
    assert (out / "ckpt").read_text() == "state\n" and not (out / "ckpt.tmp").exists()
    assert kernel.wait_exit(5) == 0
    (held,) = [h for h in report["holders"] if h["pid"] == kernel.pid]
    assert held["outcome"]["kind"] == "exited" and "shutdown_request" in held["outcome"]["why"]


def test_a_cell_job_that_stays_keeps_its_kernel_unasked_and_says_so(
        kernel: Kernel, tmp_path: Path, node: str) -> None:
    """A cell's job that takes SIGINT but never leaves: the kernel is never asked (its shutdown
    would SIGTERM the job), both time out, and the kernel's veto says why it was not asked."""
    out = tmp_path / "job"
    out.mkdir()
    kernel.command(f"spawn {CELL_JOB} {node} {out} stays")
    conf = config(tmp_path, node, "shutdown")
    conf.write_text(conf.read_text().replace("timeout_s = 20", "timeout_s = 2"))
    code, text, err = cli("--config", str(conf), "drain", "--yes", "--json")
    report = json.loads(text)
    assert code == 1 and report["verdict"] == "veto", (report, err)
    (held,) = [h for h in report["holders"] if h["pid"] == kernel.pid]
    assert held["outcome"]["kind"] == "timeout", held
    assert "after the drain began" in held["outcome"]["why"], held
    (why,) = [r for r in report["reasons"] if f"pid {kernel.pid} " in r]
    assert "the Jupyter kernel was not asked to shut down" in why and "pid " in why, why
    assert "took the shutdown request" not in why
    # The job got the one SIGINT and nothing SIGTERMed it.
    assert kernel.alive() and (out / "signals").read_text().splitlines() == ["SIGINT"]


@pytest.mark.parametrize("jupyter", ["veto", "shutdown"])
def test_a_kernels_forked_child_is_its_worker_not_a_kernel(kernel: Kernel, tmp_path: Path,
                                                           node: str, jupyter: str) -> None:
    """A process the kernel forked (multiprocessing, a DataLoader worker) runs the kernel's
    command line and holds the node through the kernel's open file: it is the kernel's
    worker, never taken for a kernel itself (asked to shut down, named in a veto), never
    signalled."""
    mark = tmp_path / "child"
    kernel.command(f"fork {mark}")
    pidfile = tmp_path / "child.pid"
    wait_for(lambda: pidfile.exists() and pidfile.read_text() != "", 30, interval=0.05)
    child = int(pidfile.read_text())
    conf = config(tmp_path, node, jupyter)
    _code, out, _err = cli("--config", str(conf), "check", "--json")
    predicted = json.loads(out)
    code, out, err = cli("--config", str(conf), "drain", "--yes", "--json")
    report = json.loads(out)
    (kid,) = [h for h in report["holders"] if h["pid"] == child]
    if jupyter == "veto":
        assert code == 1 and report["verdict"] == "veto", (report, err)
        assert report["reasons"] == predicted["reasons"]
        (reason,) = report["reasons"]  # the kernel's, and only the kernel's
        assert f"pid {kernel.pid} " in reason and "is a Jupyter kernel" in reason
        assert kid["outcome"]["kind"] == "not-signalled"
        assert kernel.alive()
    else:
        assert code == 0 and report["verdict"] == "allow", (report, err)
        (said,) = [h for h in predicted["holders"] if h["pid"] == child]
        assert "leaves with its parent" in said["outcome"]["why"], said
        assert kid["outcome"]["kind"] == "exited", kid
        assert f"left with its parent, pid {kernel.pid}" in kid["outcome"]["why"], kid
        assert kernel.wait_exit(5) == 0
    assert not mark.exists()  # no SIGINT reached the child


def test_a_busy_cells_forked_worker_is_never_left_to_the_kernels_shutdown(
        kernel: Kernel, tmp_path: Path, node: str) -> None:
    """ipykernel's shutdown SIGTERMs the children in its process group at once, while the
    cell still runs: a busy cell's forked worker (a DataLoader's) would die mid-cell. With
    [drain] jupyter = "shutdown", the guard vetoes before anyone is signalled, and the worker
    and the cell run on."""
    mark = tmp_path / "child"
    kernel.command(f"fork {mark}")
    pidfile = tmp_path / "child.pid"
    wait_for(lambda: pidfile.exists() and pidfile.read_text() != "", 30, interval=0.05)
    child = int(pidfile.read_text())
    progress = tmp_path / "progress"
    steps = 60
    kernel.command(f"busy {progress} {steps}")
    conf = config(tmp_path, node, "shutdown")
    _code, out, _err = cli("--config", str(conf), "check", "--json")
    predicted = json.loads(out)
    code, out, err = cli("--config", str(conf), "drain", "--yes", "--json")
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "veto", (report, err)
    assert report["reasons"] == predicted["reasons"]
    (reason,) = report["reasons"]
    assert f"pid {kernel.pid} " in reason and "is a Jupyter kernel" in reason
    assert f"what the cell started in its process group (pid {child}), mid-cell" in reason
    assert all(h["outcome"]["kind"] == "not-signalled" for h in report["holders"]), report
    seen = len(progress.read_text().splitlines())
    assert seen < steps and kernel.alive()
    assert Path(f"/proc/{child}").exists()  # the worker runs on
    wait_for(lambda: len(progress.read_text().splitlines()) > seen, 5, interval=0.1,
             message="the cell stopped progressing")
    assert not mark.exists()  # no SIGINT reached the worker


def test_a_refused_shutdown_request_vetoes_with_the_kernels_way_out(kernel: Kernel,
                                                                     tmp_path: Path,
                                                                     node: str) -> None:
    """The connection file's key is no longer the kernel's: the kernel drops the request
    unanswered. The veto says so, and never advises SIGINT, on which a kernel never exits
    (a busy one would lose its cell)."""
    path = Path(kernel.connection_file)
    path.write_text(json.dumps({**json.loads(path.read_text()), "key": "not-the-kernels-key"}))
    code, out, err = cli("--config", str(config(tmp_path, node, "shutdown")), "drain", "--yes",
                         "--json")
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "veto", (report, err)
    (reason,) = [r for r in report["reasons"] if f"pid {kernel.pid} " in r]
    assert "shutdown_reply" in reason, reason
    assert "kill -INT" not in reason and "Kernel > Shut Down Kernel" in reason, reason
    assert kernel.alive()

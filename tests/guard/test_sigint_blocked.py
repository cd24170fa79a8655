"""SIGINT that cannot arrive: blocked in every thread, with no sigwait and no signalfd for it.

Such a holder vetoes before anyone is signalled, and the SIGINT it would
never get is not left pending; one that waits for SIGINT in sigwait or reads
it from a signalfd is drained as any other. Real processes, real drains.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.nvidia import Checks, FakeNvidiaSmi
from helpers.runners import cli, guard, quick_veto
from helpers.wait import wait_for

from suspendguard.config import DevicesConfig, IdleConfig
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.retry import _alive as retry_alive
from suspendguard.guard.scan import scan_holders
from suspendguard.idle.base import IdleReport
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcAccessError, ProcFS
from suspendguard.system.sigdelivery import delivery

MASKED = str(Path(__file__).parents[1] / "helpers" / "masked_holder.py")
SIGINT_BIT = 1 << (signal.SIGINT - 1)

Start = Callable[[str, str], "subprocess.Popen[str]"]


@pytest.fixture
def masked(holders: Holders) -> Iterator[Start]:
    """Starts helpers/masked_holder.py jobs (marking into the holders' log); kills them after."""
    procs: list[subprocess.Popen[str]] = []

    def start(node: str, mode: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, MASKED, "--node", node, "--mode", mode,
                                 "--marker", holders.marker], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["ready", str(proc.pid)]
        return proc

    yield start
    for proc in procs:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def pending(pid: int) -> int:
    """The signals pending for ``pid``: shared (ShdPnd) and each thread's own (SigPnd)."""
    found = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("SigPnd", "ShdPnd"):
                found |= int(value, 16)
    return found


def by_pid(report: Any) -> dict[int, Any]:
    return {h.decision.holder.pid: h for h in report.holders}


def test_a_holder_with_sigint_blocked_vetoes_before_anyone_is_signalled(
        make_config: Any, node: str, holders: Holders, masked: Start) -> None:
    graceful, other = holders.start(node)
    blocked = masked(node, "blocked")
    # no wait for a signal that cannot arrive
    report = quick_veto(lambda: guard(make_config(drain={"timeout_s": 5})), 2)
    [reason] = report.verdict.texts
    assert f"pid {blocked.pid} " in reason and "SIGINT blocked in every thread" in reason
    assert "nothing waits for it" in reason and f"kill -TERM {blocked.pid}" in reason
    assert "ray stop" in reason and "timeout_s" not in reason
    results = by_pid(report)
    mine = results[blocked.pid]
    assert mine.decision.kind == "veto-sigint-blocked" and mine.decision.holder.sigint == "blocked"
    assert mine.outcome.kind == "not-signalled"
    assert mine.outcome.why == "SIGINT blocked in every thread"
    assert results[other].outcome.kind == "not-signalled"
    # Nobody was signalled: the graceful job marks nothing, the blocked one holds no SIGINT.
    time.sleep(0.2)
    assert holders.signals() == []
    assert not pending(blocked.pid) & SIGINT_BIT
    assert graceful.poll() is None and blocked.poll() is None


@pytest.mark.parametrize("mode", ["sigwait", "signalfd"])
def test_a_holder_that_waits_for_sigint_is_signalled_and_exits(
        mode: str, make_config: Any, node: str, holders: Holders, masked: Start) -> None:
    job = masked(node, mode)
    report = guard(make_config(drain={"timeout_s": 5}))
    assert report.verdict.kind == "allow", report.verdict
    [result] = report.holders
    assert result.decision.kind == "drain" and result.decision.holder.sigint == "waited"
    assert result.outcome.kind == "exited"
    assert holders.signals() == [f"{job.pid} SIGINT"]
    assert job.wait(timeout=5) == 0


def test_escalate_treats_a_blocked_holder_as_one_that_ignores_sigint(
        make_config: Any, node: str, holders: Holders, masked: Start) -> None:
    job = masked(node, "blocked")
    no_steps = guard(make_config(drain={"on_sigint_ignored": "escalate"}))
    assert no_steps.verdict.kind == "veto"
    [reason] = no_steps.verdict.texts
    assert "SIGINT blocked in every thread" in reason
    assert reason.endswith('[drain] escalate is empty: add steps such as "SIGTERM:10"')
    drain = {"timeout_s": 0.5, "on_sigint_ignored": "escalate", "escalate": ["SIGTERM:3"]}
    report = guard(make_config(drain=drain))
    assert report.verdict.kind == "allow", report.verdict
    [result] = report.holders
    assert result.decision.kind == "escalate" and result.outcome.kind == "exited"
    assert "SIGTERM" in result.outcome.why
    assert job.wait(timeout=5) == -signal.SIGTERM
    assert holders.signals() == []  # the SIGINT never reached it


def test_check_predicts_the_veto_and_the_drain(
        conf: Path, node: str, holders: Holders, masked: Start) -> None:
    blocked = masked(node, "blocked")
    waiting = [masked(node, "sigwait"), masked(node, "signalfd")]
    code, out, _ = cli("check", "--dry-run", "--json", "--config", str(conf))
    data = json.loads(out)
    assert code == 1 and data["verdict"] == "veto"
    [reason] = data["reasons"]
    assert f"pid {blocked.pid} " in reason and "SIGINT blocked in every thread" in reason
    found = {h["pid"]: h for h in data["holders"]}
    assert found[blocked.pid]["sigint"] == "blocked"
    assert found[blocked.pid]["outcome"]["why"] == "SIGINT blocked in every thread"
    for job in waiting:
        assert found[job.pid]["sigint"] == "waited"
        assert found[job.pid]["outcome"]["kind"] == "not-signalled"
    os.killpg(blocked.pid, signal.SIGKILL)
    blocked.wait()
    code, out, _ = cli("check", "--dry-run", "--json", "--config", str(conf))
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "allow", data["reasons"]
    for h in data["holders"]:
        assert h["outcome"] == {"kind": "would-signal", "seconds": None,
                                "why": "a thread waits for SIGINT (sigwait or a signalfd)"}
    assert sorted(h["pid"] for h in data["holders"]) == sorted(job.pid for job in waiting)
    # check never signals: the waiting jobs run on and took nothing.
    assert holders.signals() == [] and all(job.poll() is None for job in waiting)
    assert not any(pending(job.pid) & SIGINT_BIT for job in waiting)


def test_the_scan_reads_every_thread_where_the_main_one_blocks_sigint(
        node: str, masked: Start) -> None:
    jobs = {mode: masked(node, mode) for mode in ("blocked", "sigwait", "signalfd", "other-thread")}
    inventory = take_inventory(DevicesConfig((), (node,), ()))
    found = {h.pid: h.sigint for h in scan_holders(inventory).holders}
    # A thread started before the main one blocked SIGINT takes it: the handler's word.
    assert {mode: found[job.pid] for mode, job in jobs.items()} == {
        "blocked": "blocked", "sigwait": "waited", "signalfd": "waited", "other-thread": "caught"}
    proc = ProcFS()
    assert delivery(proc, jobs["blocked"].pid, signal.SIGINT) == "never"
    assert delivery(proc, jobs["other-thread"].pid, signal.SIGINT) == "deliverable"
    assert delivery(proc, jobs["blocked"].pid, signal.SIGTERM) == "deliverable"


@pytest.fixture(scope="module")
def leader_exit(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed (tools/test installs it)")
    out = tmp_path_factory.mktemp("bin") / "leader_exit"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(out),
                    str(Path(__file__).parent / "leader_exit.c")], check=True)
    return str(out)


def wait_zombie_leader(pid: int) -> None:
    """Until the main thread of ``pid`` has exited (state Z), its other thread living on."""
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{pid}/status").read_text().count("State:\tZ"):
        assert time.monotonic() < deadline, "the main thread never exited"
        time.sleep(0.01)


@contextlib.contextmanager
def zombie_leader(leader_exit: str, node: str, how: str) -> Iterator[subprocess.Popen[str]]:
    """leader_exit holding ``node`` once its main thread has exited, killed at the end."""
    job = subprocess.Popen([leader_exit, node, how], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline().split() == ["ready", str(job.pid)]
        wait_zombie_leader(job.pid)
        yield job
    finally:
        with contextlib.suppress(OSError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


@pytest.mark.parametrize("how", ["blocked", "open"])
def test_a_holder_whose_main_thread_exited_is_judged_by_its_live_threads(
        how: str, leader_exit: str, make_config: Any, node: str) -> None:
    # The zombie leader's mask (the one /proc/PID/status shows) lets SIGINT
    # through, but the kernel hands no signal to an exiting thread: what the
    # live thread blocks decides.
    with zombie_leader(leader_exit, node, how) as job:
        inventory = take_inventory(DevicesConfig((), (node,), ()))
        found = {h.pid: h.sigint for h in scan_holders(inventory).holders}
        assert found[job.pid] == ("blocked" if how == "blocked" else "caught")
        if how == "open":
            report = guard(make_config(drain={"timeout_s": 5}))
            assert report.verdict.kind == "allow", report.verdict
            assert job.wait(timeout=5) == 0
            return
        report = quick_veto(lambda: guard(make_config(drain={"timeout_s": 5})), 3)
        [reason] = report.verdict.texts
        assert f"pid {job.pid} " in reason and "SIGINT blocked in every thread" in reason
        [result] = report.holders
        assert result.outcome.kind == "not-signalled"
        assert not pending(job.pid) & SIGINT_BIT  # never sent


def test_retry_waits_for_a_holder_whose_main_thread_exited(leader_exit: str, node: str) -> None:
    # retry asks again once the veto's holders have gone: a zombie leader whose
    # thread holds the node has not.
    with zombie_leader(leader_exit, node, "blocked") as job:
        proc = ProcFS()
        st = proc.stat(job.pid)
        assert st is not None and st.state == "Z"
        assert retry_alive(proc, job.pid, st.start_time)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        assert not retry_alive(proc, job.pid, st.start_time)


def stop_live_threads(pid: int) -> None:
    """SIGSTOP to ``pid``, until its live threads show it (state T): the zombie leader
    still reads Z."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        tasks = Path(f"/proc/{pid}/task")
        states = {(tasks / tid / "stat").read_text().rpartition(")")[2].split()[0]
                  for tid in os.listdir(tasks) if int(tid) != pid}
        return states == {"T"}

    wait_for(stopped, interval=0.01, message="the live thread never stopped")


def continued_lives_on(job: subprocess.Popen[str]) -> bool:
    """SIGCONT to ``job``: whether it lives on, no SIGINT pending to end it (its thread
    takes SIGINT and exits)."""
    assert not pending(job.pid) & SIGINT_BIT
    os.kill(job.pid, signal.SIGCONT)
    time.sleep(0.3)
    return job.poll() is None


def test_a_stopped_holder_whose_main_thread_exited_vetoes_unsignalled(
        leader_exit: str, make_config: Any, node: str) -> None:
    # Its leader reads Z, its live thread T: the process is stopped all the same.
    with zombie_leader(leader_exit, node, "open") as job:
        stop_live_threads(job.pid)
        report = quick_veto(lambda: guard(make_config(drain={"timeout_s": 5})), 3)
        [result] = report.holders
        assert result.decision.kind == "veto-stopped", result.decision
        assert result.decision.holder.stopped == "T" and result.outcome.kind == "not-signalled"
        [reason] = report.verdict.texts
        assert f"pid {job.pid} " in reason and "stopped (SIGSTOP, state T)" in reason
        assert continued_lives_on(job)


def test_a_holder_whose_main_thread_exited_stopped_after_the_scan_is_not_signalled(
        leader_exit: str, make_config: Any, node: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Stopped while the device is read, between the scan and the signal.
    FakeNvidiaSmi(tmp_path, monkeypatch)
    check = Checks()
    with zombie_leader(leader_exit, node, "open") as job:

        def stop_then_ask(config: IdleConfig, families: Sequence[str],
                          deadline: Deadline) -> IdleReport:
            if not check.calls:  # the device's view before the drain
                stop_live_threads(job.pid)
            return check(config, families, deadline)

        report = quick_veto(lambda: guard(make_config(drain={"timeout_s": 5}),
                                          idle_check=stop_then_ask), 4)
        [reason] = report.verdict.reasons
        assert reason.code == "stopped" and reason.pid == job.pid, reason
        assert "was stopped (SIGSTOP, state T) when the signal was due" in reason.text
        [result] = report.holders
        assert result.decision.holder.stopped == ""  # running when scanned
        assert result.outcome.why == "stopped (state T) since the scan"
        assert continued_lives_on(job)


# -- what the threads' files say, on a /proc of the test's own ----------------

def fake_process(root: Path, threads: dict[int, dict[str, str]],
                 fds: dict[str, tuple[str, str]] | None = None) -> ProcFS:
    """A /proc tree with process 100, its threads' files, and fds (link target, fdinfo)."""
    base = root / "100"
    for tid, files in threads.items():
        task = base / "task" / str(tid)
        task.mkdir(parents=True)
        for name, text in files.items():
            (task / name).write_text(text)
    (base / "fd").mkdir()
    (base / "fdinfo").mkdir()
    for fd, (target, info) in (fds or {}).items():
        os.symlink(target, base / "fd" / fd)
        (base / "fdinfo" / fd).write_text(info)
    return ProcFS(str(root))


def thread(blocked: str = "0000000000000002", state: str = "S (sleeping)",
           wchan: str = "ep_poll") -> dict[str, str]:
    return {"status": f"State:\t{state}\nSigBlk:\t{blocked}\n", "wchan": wchan}


def test_sigwait_unblocks_what_it_waits_for(tmp_path: Path) -> None:
    # A thread asleep in sigwait({SIGINT}): the kernel took SIGINT out of its SigBlk.
    waits = fake_process(tmp_path / "a", {100: thread(), 101: thread(
        blocked="0000000000000000", wchan="do_sigtimedwait.isra.0")})
    assert delivery(waits, 100, signal.SIGINT) == "waited"
    # Its wchan unreadable ("0" to a reader that may not trace it): it still takes SIGINT.
    hidden = fake_process(tmp_path / "b", {100: thread(), 101: thread(
        blocked="0000000000000000", wchan="0")})
    assert delivery(hidden, 100, signal.SIGINT) == "deliverable"
    # In sigwait with SIGINT still blocked: it waits for other signals (SIGTERM, SIGHUP).
    other = fake_process(tmp_path / "c", {100: thread(), 101: thread(wchan="do_sigtimedwait")})
    assert delivery(other, 100, signal.SIGINT) == "never"


def test_a_signalfd_takes_what_its_mask_names(tmp_path: Path) -> None:
    sfd = ("anon_inode:[signalfd]", "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1\n"
           "sigmask:\t0000000000000002\n")
    reads = fake_process(tmp_path / "a", {100: thread()}, {"3": sfd})
    assert delivery(reads, 100, signal.SIGINT) == "waited"
    assert delivery(reads, 100, signal.SIGHUP) == "deliverable"  # nobody blocks SIGHUP
    other = fake_process(tmp_path / "b", {100: thread(blocked="0000000000000003")},
                         {"3": (sfd[0], sfd[1].replace("0002\n", "4000\n"))})
    assert delivery(other, 100, signal.SIGINT) == "never"  # its signalfd takes SIGTERM only


def test_an_exiting_thread_takes_nothing(tmp_path: Path) -> None:
    proc = fake_process(tmp_path, {100: thread(blocked="0000000000000000", state="Z (zombie)"),
                                   101: thread()})
    assert delivery(proc, 100, signal.SIGINT) == "never"
    gone = fake_process(tmp_path / "gone", {100: thread(state="Z (zombie)")})
    assert delivery(gone, 100, signal.SIGINT) == "unknown"


class Refusing(ProcFS):
    """A /proc whose thread 101 refuses its status (as a hardened /proc may)."""

    def read(self, pid: int, name: str, at: int | None = None) -> bytes | None:
        if name == "task/101/status":
            raise ProcAccessError("refused")
        return super().read(pid, name, at)


class Looping(ProcFS):
    """Thread 101 calls sigwait in a loop: caught between two calls, then inside one."""

    looks = 0

    def read(self, pid: int, name: str, at: int | None = None) -> bytes | None:
        if name == "task/101/status":
            self.looks += 1
            blocked = "0000000000000002" if self.looks == 1 else "0000000000000000"
            return f"State:\tS (sleeping)\nSigBlk:\t{blocked}\n".encode()
        return super().read(pid, name, at)


def test_what_the_guard_cannot_read_is_unknown_and_never_is_looked_at_twice(
        tmp_path: Path) -> None:
    fake_process(tmp_path, {100: thread(), 101: thread(wchan="do_sigtimedwait")})
    assert delivery(Refusing(str(tmp_path)), 100, signal.SIGINT) == "unknown"
    looping = Looping(str(tmp_path))
    assert delivery(looping, 100, signal.SIGINT) == "waited" and looping.looks == 2



def test_without_pidfds_a_holder_whose_main_thread_exited_is_signalled_and_waited_for(
        leader_exit: str, make_config: Any, node: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel before 5.3: the exit watch reads /proc/PID/stat, where the zombie leader
    says Z while its live thread holds the node; that is no exit, before the signal or
    after it."""
    def no_pidfd(_pid: int, _flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    with zombie_leader(leader_exit, node, "open") as job:
        report = guard(make_config(drain={"timeout_s": 5}))
        [result] = report.holders
        assert result.outcome.kind == "exited", result.outcome
        assert report.verdict.kind == "allow", report.verdict
        assert job.wait(timeout=5) == 0  # its live thread took the SIGINT


@pytest.fixture
def container_init(node: str) -> Iterator[int]:
    """A job that is PID 1 of a PID namespace of its own, as a container's program run
    without an init: it holds the node and leaves SIGINT at its default (sleep)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare")
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "sh", "-c",
                             'exec 3<"$1"; echo ready; exec sleep 600', "sh", node],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        [pid] = [int(c) for c in children]
        # "ready" comes from the shell before it becomes sleep: look at sleep, not at it.
        wait_for(lambda: Path(f"/proc/{pid}/comm").read_text().strip() == "sleep", 10,
                 message="the namespace's init runs sleep")
        yield pid
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_container_s_init_without_a_handler_vetoes_before_anyone_is_signalled(
        conf: Path, container_init: int) -> None:
    # The kernel drops a SIGINT from the host to a namespace's init that takes it by default.
    code, out, err = cli("check", "--json", "--config", str(conf))
    report = json.loads(out)
    assert (code, report["verdict"]) == (1, "veto"), err
    [reason] = report["reasons"]
    assert reason.startswith(f"pid {container_init} sleep ignores SIGINT (it is PID 1 of its "
                             "container's PID namespace and has no handler for it: the kernel "
                             "drops such a signal sent from outside)"), reason
    assert "docker run --init" in reason
    code, out, _ = cli("drain", "--yes", "--json", "--config", str(conf))
    assert code == 1 and json.loads(out)["holders"][0]["outcome"]["kind"] == "not-signalled"
    assert ProcFS().stat(container_init) is not None  # never signalled: still there

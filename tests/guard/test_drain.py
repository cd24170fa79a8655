"""The guard on real child processes: drain, veto before signalling, respawns, escalation."""

from __future__ import annotations

import errno
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.cgroups import control, freezing
from helpers.holders import Holders
from helpers.runners import guard

from suspendguard.config import EscalationStep
from suspendguard.guard.describe import describe_process
from suspendguard.guard.drain import MIN_WAIT_S, drain
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.job_stop import ASK_MIN_S, JobStop
from suspendguard.guard.pipeline import run
from suspendguard.guard.report import Report
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Outcome, holder_id
from suspendguard.store.history import History
from suspendguard.system.deadline import Cancel, Deadline
from suspendguard.system.log import Logger


def outcome_of(report: Report, pid: int) -> Any:
    return next(h.outcome for h in report.holders if h.decision.holder.pid == pid)


def test_graceful_holder_is_drained_and_allowed(make_config: Any, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node, delay=0.3)
    report = guard(make_config())
    assert report.verdict.kind == "allow", report.verdict.texts
    assert report.verdict.exit_status == 0
    out = outcome_of(report, pid)
    assert out.kind == "exited" and out.seconds is not None and out.seconds >= 0.25
    assert proc.wait(timeout=5) == 0
    assert holders.signals() == [f"{pid} SIGINT"]


def test_a_job_holding_its_node_through_an_io_uring_alone_is_drained(
        make_config: Any, node: str, holders: Holders) -> None:
    # Its own fd closed, the node registered with its ring: without the ring's fdinfo the
    # guard saw no holder, signalled nobody and allowed the suspend under a running job.
    proc, pid = holders.start(node, mode="io_uring", delay=0.3)
    report = guard(make_config())
    assert report.verdict.kind == "allow", report.verdict.texts
    assert [h.holder.pid for h in report.holders] == [pid]
    assert outcome_of(report, pid).kind == "exited"
    assert proc.wait(timeout=5) == 0
    assert holders.signals() == [f"{pid} SIGINT"]  # its own handler ran: its checkpoint


def test_holder_slower_than_the_timeout_vetoes(make_config: Any, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node, mode="slow")
    report = guard(make_config(drain={"timeout_s": 1}))
    assert report.verdict.kind == "veto"
    assert any(f"pid {pid}" in r and "still running" in r for r in report.verdict.texts)
    assert outcome_of(report, pid).kind == "timeout"
    assert proc.poll() is None  # still running at the verdict: never killed by default


def test_a_policy_drain_rule_gives_its_job_a_wait_of_its_own(make_config: Any, node: str,
                                                            holders: Holders) -> None:
    """[drain] timeout_s = 1 is too short for a job that takes 2 s to save after SIGINT; its
    [[policy.drain]] rule's 8 s is not: it saves, exits by itself, and the suspend goes on."""
    proc, pid = holders.start(node, delay=2.0)
    report = guard(make_config(drain={"timeout_s": 1},
                               policy={"drain": [{"cmdline": r"--delay 2\.0", "timeout_s": 8}]}))
    assert report.verdict.kind == "allow", report.verdict.texts
    assert proc.wait(timeout=5) == 0  # its own exit, after its save: never killed
    out = outcome_of(report, pid)
    assert out.kind == "exited" and out.seconds is not None and out.seconds >= 1.9, out
    assert holders.signals() == [f"{pid} SIGINT"]


def test_drain_wait_is_announced_and_a_cut_is_stated(make_config: Any, node: str,
                                                    holders: Holders) -> None:
    _, pid = holders.start(node, mode="slow")
    # A deadline this tight fails validation; handed in anyway, the cut must
    # be said, not silent.
    cfg = make_config(drain={"timeout_s": 3})
    cfg = replace(cfg, drain=replace(cfg.drain, deadline_s=3.5))
    log = io.StringIO()
    report = run(cfg, dry_run=False, action="suspend", origin="test", idle_check=None,
                 log=Logger(log, {}), history=History.open)
    assert report.verdict.kind == "veto"
    assert f"sent SIGINT to 1 holder(s): {pid} python" in log.getvalue()
    # The run's deadline leaves 1.5 s: less by the time the guard took to reach its wait.
    said = re.search(r"waiting up to (\d\.\d) s \(cut from 3 s to end within the deadline\)",
                     log.getvalue())
    assert said and 0.0 < float(said.group(1)) <= 1.5, log.getvalue()
    assert any(re.match(rf"the drain wait was cut to {re.escape(said.group(1))} s \(of \[drain\] "
                        r"timeout_s = 3\) to end within \[drain\] deadline_s = 3\.5", w)
               for w in report.verdict.warnings), report.verdict.warnings
    reason = next(r for r in report.verdict.texts if f"pid {pid}" in r)
    assert "(the wait was cut short by the deadline)" in reason
    assert reason.endswith(f"stop it yourself (kill -TERM {pid}), or raise [drain] timeout_s")


def test_full_wait_without_an_idle_backend(make_config: Any, node: str, holders: Holders) -> None:
    holders.start(node, mode="slow")
    log = io.StringIO()
    # deadline 5.8 - 2 s to answer leaves the whole 3 s, with 0.8 s for the scan
    # on a busy machine: nothing is kept for an idle check (which would take at
    # least budget.IDLE_MARGIN_S, 1 s, and cut the wait).
    run(make_config(drain={"timeout_s": 3, "deadline_s": 5.8}), dry_run=False, action="suspend",
        origin="test", log=Logger(log, {}), history=History.open)
    assert "waiting up to 3.0 s\n" in log.getvalue(), log.getvalue()
    assert "cut from" not in log.getvalue()


def test_deaf_holder_vetoes_before_anyone_is_signalled(make_config: Any, node: str,
                                                        holders: Holders) -> None:
    graceful, gpid = holders.start(node)
    deaf, dpid = holders.start(node, mode="deaf")
    report = guard(make_config())
    assert report.verdict.kind == "veto"
    assert any(f"pid {dpid}" in r and "ignores SIGINT" in r and "kill -2 cannot stop it" in r
               for r in report.verdict.texts)
    assert outcome_of(report, gpid).kind == "not-signalled"
    time.sleep(0.2)
    assert holders.signals() == []
    assert graceful.poll() is None and deaf.poll() is None


def test_protected_holder_vetoes_and_nobody_is_signalled(make_config: Any, node: str,
                                                         holders: Holders) -> None:
    _protected, ppid = holders.start(node, mode="deaf")
    graceful, _gpid = holders.start(node)
    cfg = make_config(policy={"protect": [{"cmdline": "--mode deaf"}]})
    report = guard(cfg)
    assert report.verdict.kind == "veto"
    assert any(f"pid {ppid}" in r and "protected" in r for r in report.verdict.texts)
    decision = next(h.decision for h in report.holders if h.decision.holder.pid == ppid)
    assert decision.action == "protect" and "[policy] protect #1" in decision.rule
    time.sleep(0.2)
    assert holders.signals() == [] and graceful.poll() is None


def test_ignore_rule_does_not_count(make_config: Any, node: str, holders: Holders) -> None:
    _, pid = holders.start(node, mode="deaf")
    report = guard(make_config(policy={"ignore": [{"cmdline": "--mode deaf"}]}))
    assert report.verdict.kind == "allow"
    assert outcome_of(report, pid).kind == "not-signalled"


def test_supervisor_restarting_its_job_is_a_respawn_veto(make_config: Any, node: str,
                                                        holders: Holders) -> None:
    _, supervisor = holders.start(node, mode="supervisor")
    report = guard(make_config(drain={"rounds": 2}))
    assert report.verdict.kind == "veto"
    respawn = [r for r in report.verdict.texts if "respawned" in r]
    assert respawn, report.verdict.texts
    # The reason names who restarted it (its parent: no unit here) and the next step.
    assert f"restarted by its supervisor, parent pid {supervisor} python" in respawn[0]
    assert respawn[0].endswith("stop the supervisor before suspending")
    assert max(h.round for h in report.holders) >= 2
    assert sum(1 for s in holders.signals() if s.endswith("SIGINT")) == 2  # one per round


def test_escalation_reaches_a_holder_that_ignores_sigint(make_config: Any, node: str,
                                                        holders: Holders) -> None:
    proc, pid = holders.start(node, mode="stubborn")
    cfg = make_config(drain={"timeout_s": 0.5, "on_sigint_ignored": "escalate",
                             # long enough for the holder's handler to run and mark it
                             "escalate": ["SIGTERM:1.5", "SIGKILL:5"]})
    report = guard(cfg)
    assert report.verdict.kind == "allow", report.verdict.texts
    out = outcome_of(report, pid)
    assert out.kind == "exited" and "SIGKILL" in out.why
    assert f"{pid} SIGTERM" in holders.signals()
    assert proc.wait(timeout=5) == -9
    # Said wherever the drain is told: it did not leave on its own signal.
    from suspendguard.guard.render import allow_entry, holder_lines
    lines = holder_lines(report.holders, 80)
    [row] = [line for line in lines if line.split()[:1] == [str(pid)]]
    assert f"exited after {out.seconds:.2f} s" in row
    assert any(line.startswith(f"  pid {pid}: ") and line.endswith("after escalation to SIGKILL")
               for line in lines), lines
    entry = allow_entry(report.attempt, report.holders)
    assert f"pid {pid} " in entry["MESSAGE"] and "(after escalation to SIGKILL)" in entry["MESSAGE"]
    assert out.describe() == f"exited after {out.seconds:.2f} s, after escalation to SIGKILL"


def test_default_never_escalates(make_config: Any, node: str, holders: Holders) -> None:
    proc, _pid = holders.start(node, mode="stubborn")
    report = guard(make_config(drain={"timeout_s": 0.5, "on_sigint_ignored": "signal-anyway"}))
    assert report.verdict.kind == "veto"
    assert proc.poll() is None and holders.signals() == []


def test_recycled_pid_is_never_signalled(node: str, holders: Holders) -> None:
    # The start time is injected: the scanned record says the process started
    # one tick later than the one now behind that PID, i.e. the PID was reused.
    proc, pid = holders.start(node)
    inv = take_inventory(make_devices(node))
    scanned = next(h for h in scan_holders(inv).holders if h.pid == pid)
    from dataclasses import replace
    stale = replace(scanned, start_time=scanned.start_time + 1)
    result = drain([stale], "SIGINT", 1.0, Deadline(time.monotonic() + 5))
    out = result.outcomes[(pid, stale.start_time)]
    assert out.kind == "not-signalled" and "reused" in out.why
    time.sleep(0.2)
    assert proc.poll() is None and holders.signals() == []


def make_devices(node: str) -> Any:
    from suspendguard.config import DevicesConfig
    return DevicesConfig((), (node,), ())


def test_dry_run_sends_nothing(make_config: Any, node: str, holders: Holders) -> None:
    proc, pid = holders.start(node)
    deaf, _dpid = holders.start(node, mode="deaf")
    report = guard(make_config(), dry_run=True)
    assert report.verdict.kind == "veto"
    assert outcome_of(report, pid).kind == "not-signalled"
    report = guard(make_config(policy={"ignore": [{"cmdline": "--mode deaf"}]}), dry_run=True)
    assert report.verdict.kind == "allow"
    assert outcome_of(report, pid).kind == "would-signal"
    time.sleep(0.3)
    assert holders.signals() == [] and proc.poll() is None and deaf.poll() is None


def test_sigterm_to_the_guard_ends_as_veto(make_config: Any, node: str, holders: Holders) -> None:
    _proc, _pid = holders.start(node, mode="slow")
    cancel = Cancel()
    threading.Timer(0.5, cancel.cancel, args=("guard received SIGTERM",)).start()
    started = time.monotonic()
    report = guard(make_config(drain={"timeout_s": 20}), cancel=cancel)
    assert time.monotonic() - started < 10
    assert report.verdict.kind == "veto"
    assert any("guard received SIGTERM" in r for r in report.verdict.texts)
    cancel.close()


def test_no_holders_allows(make_config: Any) -> None:
    report = guard(make_config())
    assert report.verdict.kind == "allow" and report.holders == ()


def test_fatal_signal_handler_is_diagnosed_but_faulthandler_is_not(
        make_config: Any, node: str, holders: Holders) -> None:
    _, segv = holders.start(node, mode="segv-handler")
    _, fh = holders.start(node, mode="faulthandler")
    report = guard(make_config(), dry_run=True)
    notes = {h.decision.holder.pid: h.decision.notes for h in report.holders}
    assert any("catches fatal signals (SIGSEGV)" in n and "driver's own cleanup" in n
               for n in notes[segv])
    assert notes[fh] == ()
    assert report.verdict.kind == "allow"  # a note, not a veto


@pytest.fixture
def frozen_cgroup() -> Iterator[Callable[[int], str]]:
    """A cgroup v2 of this test's own, frozen with the holders put in it."""
    from suspendguard.system.procfs import ProcFS

    root = ProcFS().unified_root()
    if root is None or os.geteuid() != 0:
        pytest.skip("needs root and a cgroup v2 tree")
    with freezing(root, "a cgroup", "cgroup.freeze", "1", "0",
                  lambda path: "frozen 1" in control(path, "cgroup.events")) as freeze:
        yield freeze


def test_frozen_holder_vetoes_unsignalled(
        make_config: Any, node: str, holders: Holders, frozen_cgroup: Any) -> None:
    _, pid = holders.start(node)
    frozen_cgroup(pid)
    report = guard(make_config())
    assert report.verdict.kind == "veto"
    assert any(f"pid {pid}" in r and "frozen cgroup" in r for r in report.verdict.texts)
    assert outcome_of(report, pid).why == "frozen cgroup"
    assert holders.signals() == []


def test_progress_is_logged_while_waiting(node: str, holders: Holders) -> None:
    _, pid = holders.start(node, mode="slow")
    inv = take_inventory(make_devices(node))
    [holder] = [h for h in scan_holders(inv).holders if h.pid == pid]
    lines: list[str] = []
    result = drain([holder], "SIGINT", 2.0, Deadline(time.monotonic() + 6), log=lines.append,
                   progress_every_s=0.3)
    assert result.outcomes[(pid, holder.start_time)].kind == "timeout", lines
    assert lines[0].startswith("sent SIGINT to 1 holder(s)")
    waiting = [line for line in lines if line.startswith("still waiting for 1 holder(s)")]
    assert len(waiting) >= 2 and f"pid {pid} python" in waiting[0]



def test_the_holders_a_signal_reached_are_handed_on_before_the_wait_the_recycled_one_not(
        node: str, holders: Holders) -> None:
    """What the history writes down so that an attempt after a guard killed in the wait sends
    no second SIGINT: each holder once, while it still runs, and never one not signalled."""
    _slow, spid = holders.start(node, mode="slow")
    _stubborn, tpid = holders.start(node, mode="stubborn")
    _other, opid = holders.start(node, mode="slow")
    _kernel, kpid = holders.start(node, mode="slow")
    found = {h.pid: h for h in scan_holders(take_inventory(make_devices(node))).holders}
    stale = replace(found[opid], start_time=found[opid].start_time + 1)
    handed: list[tuple[list[int], bool]] = []
    seen_by_the_ask: list[list[tuple[list[int], bool]]] = []

    def reached(hs: Any) -> str:
        handed.append((sorted(h.pid for h in hs), _slow.poll() is None))
        return "history: not written"

    def ask(_left_s: float) -> str:  # a kernel's shutdown request, which may wait seconds for its answer
        seen_by_the_ask.append(list(handed))
        return ""

    result = drain([found[spid], found[tpid], stale, found[kpid]], "SIGINT", 0.3,
                   Deadline(time.monotonic() + 10), (EscalationStep("SIGTERM", 0.3),),
                   reached=reached, jobs=JobStop(asks={holder_id(found[kpid]): ask}))
    # The stubborn one ignores SIGINT and is reached all the same; SIGTERM reaches no one new,
    # and the kernel asked its own way is never handed on.
    assert handed == [(sorted([spid, tpid]), True)]
    assert seen_by_the_ask == [handed]  # written down before the ask was sent
    assert result.warnings == ("history: not written",)
    assert result.outcomes[(opid, stale.start_time)].kind == "not-signalled"


def _no_pidfd(pid: int) -> int:
    """A kernel before 5.3, as Ascend's older supported distributions ship."""
    raise OSError(errno.ENOSYS, "Function not implemented")


def test_without_pidfds_the_drain_still_works(node: str, holders: Holders) -> None:
    graceful, gpid = holders.start(node, delay=0.2)
    _, spid = holders.start(node, mode="slow")
    inv = take_inventory(make_devices(node))
    found = {h.pid: h for h in scan_holders(inv).holders}
    stale = replace(found[spid], start_time=found[spid].start_time + 1)
    result = drain([found[gpid], found[spid]], "SIGINT", 1.0, Deadline(time.monotonic() + 10),
                   opener=_no_pidfd)
    out = result.outcomes[(gpid, found[gpid].start_time)]
    assert out.kind == "exited" and out.seconds is not None and out.seconds >= 0.15
    assert result.outcomes[(spid, found[spid].start_time)].kind == "timeout"
    assert graceful.wait(timeout=5) == 0
    # A recycled pid is not signalled here either.
    result = drain([stale], "SIGINT", 1.0, Deadline(time.monotonic() + 5), opener=_no_pidfd)
    assert result.outcomes[(spid, stale.start_time)].kind == "not-signalled"
    assert sorted(holders.signals()) == sorted([f"{gpid} SIGINT", f"{spid} SIGINT"])


def test_without_pidfds_escalation_reaches_a_deaf_holder(node: str, holders: Holders) -> None:
    proc, pid = holders.start(node, mode="stubborn")
    [holder] = [h for h in scan_holders(take_inventory(make_devices(node))).holders if h.pid == pid]
    result = drain([holder], "SIGINT", 0.3, Deadline(time.monotonic() + 10),
                   (EscalationStep("SIGTERM", 1.5), EscalationStep("SIGKILL", 5)),
                   opener=_no_pidfd)
    assert result.outcomes[(pid, holder.start_time)].kind == "exited"
    assert proc.wait(timeout=5) == -9 and f"{pid} SIGTERM" in holders.signals()


def test_a_guard_stopped_or_out_of_time_while_jobs_are_kept_down_signals_nobody(
        node: str, holders: Holders) -> None:
    # The supervisors' keep-down (a daemon-reload under load) is where a drain can spend its
    # time, and where the operator's Ctrl-C lands: a signal after it would cost the job its
    # work for a veto all the same. No save (delay 0): the floor's wait is the job's to exit in.
    job, pid = holders.start(node, delay=0.0)
    [holder] = [h for h in scan_holders(take_inventory(make_devices(node))).holders if h.pid == pid]
    cancel = Cancel()
    stopped = drain([holder], "SIGINT", 5.0, Deadline(time.monotonic() + 10, cancel),
                    keep=lambda _hs: cancel.cancel("guard received SIGINT"))
    assert stopped.outcomes[(pid, holder.start_time)] == Outcome("not-signalled",
                                                                 why="guard received SIGINT")
    late = drain([holder], "SIGINT", 5.0, Deadline(time.monotonic() + 0.6),
                 keep=lambda _hs: time.sleep(0.55))
    outcome = late.outcomes[(pid, holder.start_time)]
    assert outcome.kind == "not-signalled" and outcome.why.startswith("could not be signalled: "
                                                                      "no time was left")
    # A round begun with less than that left of the run: no keep-down needed to spend it.
    spent = drain([holder], "SIGINT", 5.0, Deadline(time.monotonic() + 0.05))
    assert spent.outcomes[(pid, holder.start_time)] == outcome
    assert holders.signals() == [] and job.poll() is None
    # A round at its floor (MIN_WAIT_S, all the run's deadline leaves it) signals and waits.
    done = drain([holder], "SIGINT", 5.0, Deadline(time.monotonic() + MIN_WAIT_S))
    assert done.outcomes[(pid, holder.start_time)].kind == "exited"
    assert holders.signals() == [f"{pid} SIGINT"] and job.wait(timeout=5) is not None


def test_only_the_confirmed_holders_are_signalled(make_config: Any, node: str,
                                                  holders: Holders) -> None:
    """``drain`` without --yes: a holder that appeared after the confirmed list is not
    signalled, and vetoes: the confirmed one is then left running too (a certain veto
    signals nobody)."""
    from suspendguard.model import holder_id
    shown_job, _shown_pid = holders.start(node)
    cfg = make_config()
    listed = run(cfg, dry_run=True, origin="cli", record=False, idle_check=None,
                 log=Logger(io.StringIO(), {}))
    confirmed = {holder_id(hr.decision.holder) for hr in listed.holders}
    late, late_pid = holders.start(node)  # after the operator answered
    report = run(cfg, dry_run=False, origin="cli", idle_check=None, log=Logger(io.StringIO(), {}),
                 confirmed=confirmed, history=History.open)
    assert holders.signals() == []
    assert late.poll() is None and shown_job.poll() is None
    assert report.verdict.kind == "veto"
    assert any(f"pid {late_pid}" in r and "appeared after the list was confirmed" in r
               for r in report.verdict.texts), report.verdict.texts
    assert outcome_of(report, late_pid).why == "not on the list that was confirmed"


@pytest.mark.parametrize("rule", [True, False], ids=["own-wait", "default-wait"])
def test_a_policy_drain_rule_gives_its_job_a_longer_wait(make_config: Any, node: str,
                                                         holders: Holders, rule: bool) -> None:
    # A job whose checkpoint takes 2 s, and a [drain] timeout_s of 1 s.
    _proc, pid = holders.start(node, delay=2.0)
    rules = [{"uid": os.getuid(), "exe": "*python*", "timeout_s": 6}] if rule else []
    log = io.StringIO()
    report = run(make_config(drain={"timeout_s": 1, "deadline_s": 20}, policy={"drain": rules}),
                 dry_run=False, action="suspend", origin="test", idle_check=None,
                 log=Logger(log, {}), history=History.open)
    if rule:
        assert report.verdict.kind == "allow", report.verdict
        assert "waiting up to 6.0 s" in log.getvalue(), log.getvalue()
        assert outcome_of(report, pid).kind == "exited"
    else:
        assert report.verdict.kind == "veto"
        assert outcome_of(report, pid).kind == "timeout"


def test_check_and_the_veto_say_what_the_job_took_before(make_config: Any, node: str,
                                                         holders: Holders) -> None:
    # A real drain of the job first (it exits 0.3 s after SIGINT), then the same
    # program again: check predicts from that history, and a timeout's reason says it.
    holders.start(node, delay=0.3)
    cfg = make_config(drain={"timeout_s": 5})
    assert guard(cfg).verdict.kind == "allow"
    _proc, pid = holders.start(node, delay=3.0)
    predicted = guard(cfg, dry_run=True, record=False)
    why = outcome_of(predicted, pid).why
    assert re.search(r"it took 0\.[3-9] s to exit after its signal the last time$", why), why
    report = guard(make_config(drain={"timeout_s": 1, "deadline_s": 20}))
    reason = next(r for r in report.verdict.texts if f"pid {pid}" in r)
    assert re.search(r"\(it took 0\.[3-9] s to exit after its signal the last time\): ", reason), \
        reason


def started(holders: Holders, code: dict[str, str]) -> dict[str, subprocess.Popen[str]]:
    """A child running each of ``code``, in order, each once it printed "ready"; cleaned up
    with the suite's holders."""
    procs = {}
    for name, text in code.items():
        proc = subprocess.Popen([sys.executable, "-c", text], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        holders.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        procs[name] = proc
    return procs


def test_a_deferred_ask_that_fails_leaves_no_stale_fd_to_spin_on(holders: Holders) -> None:
    # A kernel's shutdown request waits for the job it started (A) to leave; when it then
    # fails, the kernel is dropped and its pidfd closed. Still registered with the poll,
    # it woke every poll at once (POLLNVAL): the wait spun on a core while B, still
    # saving, needed it.
    code = {"A": "import time; print('ready', flush=True); time.sleep(60)",
            "B": "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                 "print('ready', flush=True); time.sleep(60)",
            "K": "import time; print('ready', flush=True); time.sleep(60)"}
    procs = started(holders, code)
    found = {name: describe_process(p.pid, []) for name, p in procs.items()}
    assert all(found.values())
    ids = {name: holder_id(h) for name, h in found.items() if h is not None}
    jobs = JobStop(asks={ids["K"]: lambda _left_s: "the kernel's control channel refused"},
                   after={ids["K"]: frozenset({ids["A"]})})
    ticks = 0

    def clock() -> float:
        nonlocal ticks
        ticks += 1
        return time.monotonic()

    result = drain([h for h in found.values() if h is not None], "SIGINT", 1.0,
                   Deadline(time.monotonic() + 30, clock=clock), jobs=jobs, progress_every_s=60)
    assert result.outcomes[ids["A"]].kind == "exited"
    assert result.outcomes[ids["K"]].kind == "not-signalled"
    assert result.outcomes[ids["B"]].kind == "timeout"  # the wait ran its whole second
    assert procs["K"].poll() is None  # never signalled
    assert ticks < 100, f"{ticks} looks at the clock in one second: the wait spun"


@pytest.mark.parametrize(("save_s", "asked"), [(2.2, False), (0.3, True)],
                         ids=["too-late", "bounded"])
def test_a_deferred_ask_gets_what_is_left_of_the_wait_and_none_when_too_little(
        holders: Holders, save_s: float, asked: bool) -> None:
    # The kernel's request waits for the job its cell started (A), which saves for ``save_s``
    # after its SIGINT, of a 3 s wait. With less than ASK_MIN_S left the request is not sent
    # (it held the wait up to 5 s past its end, and the veto then blamed a busy cell); sent,
    # it may take only what is left of the wait.
    code = {"A": "import signal, sys, time; signal.signal(signal.SIGINT, lambda *_: (time.sleep("
                 f"{save_s}), sys.exit(0))); print('ready', flush=True); time.sleep(60)",
            "K": "import time; print('ready', flush=True); time.sleep(60)"}
    procs = started(holders, code)
    found = {name: describe_process(p.pid, []) for name, p in procs.items()}
    ids = {name: holder_id(h) for name, h in found.items() if h is not None}
    given: list[float] = []

    def ask(left_s: float = -1.0) -> str:  # a kernel that takes the request, and takes its time
        given.append(left_s)
        time.sleep(max(left_s, 0))
        return ""

    started_at = time.monotonic()
    result = drain([h for h in found.values() if h is not None], "SIGINT", 3.0,
                   Deadline(time.monotonic() + 30), progress_every_s=60,
                   jobs=JobStop(asks={ids["K"]: ask}, after={ids["K"]: frozenset({ids["A"]})}))
    took = time.monotonic() - started_at
    assert result.outcomes[ids["A"]].kind == "exited"
    kernel = result.outcomes[ids["K"]]
    if asked:
        assert len(given) == 1 and ASK_MIN_S <= given[0] <= 3.0 - save_s + 0.05, given
        assert kernel.kind == "timeout" and "after a shutdown request" in kernel.why, kernel
    else:
        assert given == []
        assert kernel == Outcome("not-signalled", why="could not be signalled: not asked: no time "
                                 "was left of the wait for a shutdown request")
    assert took < 3.0 + 1.0, f"the drain took {took:.2f} s of its 3 s wait"
    assert procs["K"].poll() is None  # never signalled


def test_every_signal_goes_before_a_kernels_shutdown_request(holders: Holders) -> None:
    # A request runs a child and waits for its answer (up to 5 s): a job listed after the
    # kernel waited as long for its SIGINT. J blocks SIGINT, so a SIGINT sent stays pending
    # where the ask can see it.
    code = {"K": "import time; print('ready', flush=True); time.sleep(60)",
            "J": "import signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); "
                 "print('ready', flush=True); time.sleep(60)"}
    procs = started(holders, code)  # K first: first in the drain's list
    found = [describe_process(p.pid, []) for p in procs.values()]
    kernel, job = found
    assert kernel is not None and job is not None
    pending_at_ask: list[bool] = []

    def ask(_left_s: float) -> str:
        status = Path(f"/proc/{job.pid}/status").read_text()
        pending = int(next(line for line in status.splitlines()
                           if line.startswith("ShdPnd:")).split()[1], 16)
        pending_at_ask.append(bool(pending & (1 << (signal.SIGINT - 1))))
        return ""

    result = drain([kernel, job], "SIGINT", 0.3, Deadline(time.monotonic() + 30),
                   jobs=JobStop(asks={holder_id(kernel): ask}))
    assert pending_at_ask == [True]  # J had its SIGINT when the kernel was asked
    assert result.outcomes[holder_id(job)].kind == "timeout"  # it blocks SIGINT, and stays


def test_a_holder_that_runs_the_guard_itself_vetoes_unsignalled(node: str, tmp_path: Path) -> None:
    """A notebook or a training script that runs `suspendguard drain` holds the device as the
    guard's ancestor: never signalled, and no drain of that run can end it, so it vetoes."""
    import json
    import textwrap
    conf = tmp_path / "guard.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\n'
                    f'dir = "{tmp_path / "state"}"\n[idle]\nbackends = []\n')
    job = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, subprocess, sys
        node = open({node!r}, "rb")
        done = subprocess.run([sys.executable, "-m", "suspendguard", "--config", {str(conf)!r},
                               "drain", "--yes", "--json"], capture_output=True, text=True)
        print(os.getpid())
        print(done.stdout)
    """)], capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr
    pid, out = job.stdout.split("\n", 1)
    report = json.loads(out)
    assert report["verdict"] == "veto", report
    [detail] = report["reason_details"]
    assert detail["code"] == "unsignallable" and detail["pid"] == int(pid), detail
    assert "never signalled (the guard itself or one of its ancestors)" in detail["text"]
    [held] = [h for h in report["holders"] if h["pid"] == int(pid)]
    assert held["outcome"]["kind"] == "not-signalled"

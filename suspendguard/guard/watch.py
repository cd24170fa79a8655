"""The watch: a logind ``block`` inhibitor on sleep held while the guard is certain to veto.

Desktops and ``systemd-inhibit --list`` show logind's inhibitors; the veto unit only speaks once a
suspend has begun. So the watch takes the guard's dry run again and again (signals nobody, records
nothing) and, while it says veto and the mode (``suspendguard mode``) is enforce, holds
``Inhibit("sleep", "suspendguard", <first reason>, "block")``. When its cause changes the new lock
is taken before the old one is closed (one logind refuses leaves the old in place, and the status
says both); the lock goes as soon as a look no longer vetoes or the mode is switched to observe or
off. Never ``shutdown``. An ``unknown`` verdict holds nothing.

A look is a full dry run (the /proc scan: 0.1-1 s of CPU on 3,000 processes), so it runs only when
something may have changed, and on a bound (docs/watch.md has the figures):

- inotify on every accelerator node, watched before each look so that what happens during one
  is read after it: a job that opens one, a holder that lets go (the kernel reports the close
  when the last fd and mapping go); and on the state folder;
- a pidfd for each holder whose decision counts (drained, protected, vetoing; not one the policy
  leaves alone, as a monitoring tool run anew each time) (at most :data:`MAX_PIDFDS`): readable
  when it exits, also when it holds the node through a path inotify does not see;
- a look every ``recheck_s`` for what neither sees (a container's own copy of a node, a changed
  SIGINT disposition, a new node), stretched so that these looks stay under :data:`BOUND_SHARE`
  of one core (at most :data:`MAX_BOUND_S`): the watch measures each look's CPU.

Events wait ``debounce_s``; looks are at least :data:`MIN_GAP_S` apart. For opens and closes the
gap doubles while their looks find nothing new (an agent opening the nodes every second), up to
:data:`MAX_GAP_S` or :data:`STORM_SHARE` of a core, back at the first change. An exit or a switched
mode waits only :data:`MIN_GAP_S`, also one during a look. Opens and closes during a look may be
its own (an idle backend opens the nodes) or a job's that its scan had passed: one more look,
:data:`MIN_GAP_S` after it (the grown gap in a storm); after that one, only opens and closes that
do not balance (a node kept open or let go, one gone) look again. poll(2) between.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import TextIO

from suspendguard.config import Config
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.pipeline import run
from suspendguard.guard.run import OnDemandOwnerControl
from suspendguard.guard.watch_fds import Seen, node_events
from suspendguard.guard.watch_fds import pidfd_of as pidfd_of  # guard/ready.py's too
from suspendguard.model import Unavailable
from suspendguard.store import mode as guard_mode
from suspendguard.system.dbus.logind import GUARD_WHO, take_inhibitor
from suspendguard.system.deadline import Cancel
from suspendguard.system.inotify import FOLDER_EVENTS, Inotify
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS
from suspendguard.system.sdnotify import Notifier
from suspendguard.verdict import Verdict

WHO = GUARD_WHO
RECHECK_S = 60.0
DEBOUNCE_S = 0.2
MIN_GAP_S = 1.0
MAX_GAP_S = 8.0
# Shares of one core the bounded looks, and a storm's, may take (module doc).
BOUND_SHARE = 0.004
STORM_SHARE = 0.02
MAX_BOUND_S = 900.0
RETRY_S = 5.0  # a refused Inhibit is tried again
MAX_PIDFDS = 256


@dataclass(frozen=True, slots=True)
class Sight:
    """What one look found: the verdict, the nodes to watch, the holders (pid, start time)
    whose exit may change the verdict."""

    verdict: Verdict
    nodes: tuple[str, ...]
    holders: tuple[tuple[int, int], ...]

    @property
    def why(self) -> str | None:
        """The block's reason while the verdict is a veto; None when nothing would veto."""
        if self.verdict.kind != "veto" or not self.verdict.reasons:
            return None
        return self.verdict.reasons[0].text

    @property
    def cause(self) -> tuple[object, ...] | None:
        return self.verdict.reasons[0].identity if self.why is not None else None


Look = Callable[[Cancel], Sight]
Take = Callable[[str], "int | Unavailable"]


def dry_look(config: Config, environ: Mapping[str, str], proc: ProcFS) -> Look:
    """The guard's dry run as a look (what ``check`` runs, without the history's drain times)."""
    # The look's own warnings would repeat at every look: the watch says what changes.
    sink = Logger(open(os.devnull, "w"), environ, quiet=True)  # noqa: SIM115 (lives as long)

    def look(cancel: Cancel) -> Sight:
        report = run(config, dry_run=True, record=False, origin="watch", proc=proc,
                     log=sink, cancel=cancel,
                     supervisors=OnDemandOwnerControl(environ, config.state.dir))
        # A holder the policy leaves alone (a monitoring tool, a new process at each run)
        # changes no verdict: neither a pidfd nor a reason to reset the back-off.
        return Sight(report.verdict, tuple(n.path for n in report.inventory.nodes),
                     tuple((h.holder.pid, h.holder.start_time) for h in report.holders
                           if h.decision.kind != "leave"))

    return look


def logind_take(why: str) -> int | Unavailable:
    return take_inhibitor("sleep", WHO, why, "block")


@dataclass
class Watch:
    """The loop's state; :meth:`run` until cancelled."""

    look: Look
    take: Take
    notifier: Notifier
    log: Logger
    proc: ProcFS
    recheck_s: float = RECHECK_S
    debounce_s: float = DEBOUNCE_S
    clock: Callable[[], float] = time.monotonic
    held: tuple[int, str, object] | None = None  # the inhibitor's fd, its why and its cause
    failed: str = ""  # why the last Inhibit was refused, "" when it was not
    gap: float = MIN_GAP_S
    inotify: Inotify | None = None
    pidfds: dict[int, tuple[int, int]] = field(default_factory=dict)  # fd -> (pid, start)
    last: Sight | None = None
    looks: int = 0
    last_end: float = 0.0  # when the last look ended
    unwatched: set[str] = field(default_factory=set)  # nodes inotify refused, and why
    look_cpu: float = 0.0  # CPU seconds the last look took, its forked workers' included
    state_dir: str | None = None  # whose mode file (suspendguard mode) it obeys; None: enforce
    mode: guard_mode.Mode = guard_mode.ENFORCE
    switches: Inotify | None = None  # the state folder's changes: the mode switched
    known: Callable[[], tuple[str, ...]] | None = None  # the nodes now; None: the last look's

    @property
    def bound(self) -> float:
        """Seconds between two looks when nothing happens: --recheck, or longer for a slow look."""
        return min(MAX_BOUND_S, max(self.recheck_s, self.look_cpu / BOUND_SHARE))

    @property
    def max_gap(self) -> float:
        return max(MAX_GAP_S, self.look_cpu / STORM_SHARE)

    def start(self) -> None:
        try:
            self.inotify = Inotify()
            if self.state_dir is not None:
                self.switches = Inotify(FOLDER_EVENTS)
        except OSError as exc:
            self.log.warning(f"watch: no inotify ({exc.strerror}): looking every "
                             f"{self.recheck_s:g} s and at holders' exits only")

    def run(self, cancel: Cancel) -> None:
        self.start()
        due, pending, again = self._look(cancel, by_event=False, again=False)
        self.notifier.send(READY="1", STATUS=self.status())
        watchdog = self.notifier.watchdog_s
        ping_at = self.clock() + watchdog / 2 if watchdog else None
        while not cancel.cancelled:
            now = self.clock()
            wake = min(x for x in (due, pending, ping_at) if x is not None)
            fds = [cancel.fd, *self.pidfds]
            fds += [i.fd for i in (self.inotify, self.switches) if i is not None]
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            ready = {fd for fd, _ in poller.poll(max(0, int((wake - now) * 1000) + 1))}
            if cancel.cancelled:
                break
            now = self.clock()
            if ping_at is not None and watchdog and now >= ping_at:
                self.notifier.send(WATCHDOG="1")
                ping_at = now + watchdog / 2
            seen = self._events(ready)
            if seen.nodes or seen.exited:
                if now - self.last_end >= self.max_gap:
                    self.gap = MIN_GAP_S  # quiet for a while: the storm, if any, is over
                # A holder's exit, or the mode switched, is what ends a block: it waits for no
                # grown gap.
                gap = MIN_GAP_S if seen.exited else self.gap
                soon = max(now + self.debounce_s, self.last_end + gap)
                pending = soon if pending is None else min(pending, soon)
            if (pending is not None and now >= pending) or now >= due:
                by_event = pending is not None and now >= pending
                due, pending, again = self._look(cancel, by_event, again)
                self.notifier.send(STATUS=self.status())

    def _look(self, cancel: Cancel, by_event: bool, again: bool) -> tuple[float, float | None, bool]:
        """One look, then what happened during it: when the next bounded look is due, when an
        event-driven one is (None: none), and whether that one looks again (module doc)."""
        storm = self.gap > MIN_GAP_S  # as it was before this look, which may double it
        due = self.step(cancel, by_event)
        if cancel.cancelled:
            return due, None, False
        seen = self._events(None)
        times: list[float] = []
        if seen.exited:  # never the look's own: looked at as soon as any exit is
            times.append(max(self.clock() + self.debounce_s, self.last_end + MIN_GAP_S))
        # Opens and closes during the look: perhaps its own, perhaps a job's after the scan
        # passed it. Another look, its gap as for any open; after that one, only what its own
        # opens cannot be (a node left open or closed on balance, one gone) looks again.
        if seen.nodes and not (again and seen.balanced):
            gap = self.gap if storm else MIN_GAP_S
            times.append(max(self.clock() + self.debounce_s, self.last_end + gap))
            return due, min(times), True
        return due, min(times, default=None), False

    def _events(self, ready: set[int] | None) -> Seen:
        """What happened since the last read; ``ready`` None: look without waiting."""
        nodes, balanced = False, True
        if self.inotify is not None and (ready is None or self.inotify.fd in ready):
            nodes, balanced = node_events(self.inotify.read())
        exited = False
        if self.switches is not None and (ready is None or self.switches.fd in ready):
            # The mode file, or the state folder made (by the first switch) where there was none.
            wanted = {self.state_dir, os.path.join(self.state_dir or "", guard_mode.MODE_NAME)}
            exited = any(path in wanted for path, _ in self.switches.read())
        for fd in list(self.pidfds):
            if ready is not None and fd not in ready:
                continue
            if ready is None and not select.select([fd], [], [], 0)[0]:
                continue
            with contextlib.suppress(OSError):
                os.close(fd)
            del self.pidfds[fd]
            exited = True
        return Seen(nodes, balanced, exited)

    def step(self, cancel: Cancel, by_event: bool) -> float:
        """One look and what follows from it; when the next bounded look is due (the watchdog
        pinged first: a look may take all of its bound, which the watchdog covers once)."""
        if self.notifier.watchdog_s:
            self.notifier.send(WATCHDOG="1")
        before = self.last
        self.prepare()
        cpu = _cpu_s()
        sight = self.look(cancel)
        self.look_cpu = _cpu_s() - cpu
        self.looks += 1
        self.last_end = self.clock()
        if cancel.cancelled:
            return self.last_end
        self.last = sight
        mode = guard_mode.read(self.state_dir) if self.state_dir is not None else self.mode
        switched, self.mode = mode.name != self.mode.name, mode
        same = (before is not None and before.cause == sight.cause and not switched and
                set(before.holders) == set(sight.holders))
        if by_event:
            self.gap = min(self.gap * 2, self.max_gap) if same else MIN_GAP_S
        if switched:
            self.log.notice(f"watch: the guard's mode is {mode.name} (suspendguard mode): "
                            + ("a sleep is blocked while it would veto" if mode.enforcing
                               else "no sleep is blocked"))
        # Observe and off refuse no suspend: no block in their name either.
        self.hold(sight.why if mode.enforcing else None, sight.cause)
        self.follow(sight.nodes, sight.holders)
        retry = self.failed and sight.why is not None
        return self.last_end + (min(RETRY_S, self.bound) if retry else self.bound)

    def hold(self, why: str | None, cause: object = None) -> None:
        """The block held for ``why`` (None: released); a new one before the old goes, only
        for a new ``cause`` (the same veto, its figures changed, keeps its block)."""
        if why is None:
            if self.held is not None:
                fd, old, _ = self.held
                self.held = None
                os.close(fd)
                self.log.notice(f"watch: sleep block released (was: {old})")
            self.failed = ""
            return
        cause = why if cause is None else cause
        if self.held is not None and self.held[2] == cause and not self.failed:
            return
        got = self.take(why)
        if isinstance(got, Unavailable):
            if got.reason != self.failed:
                stays = f"; the block taken earlier stays: {self.held[1]}" if self.held else ""
                self.log.warning(f"watch: cannot take the sleep block ({got.reason}): {why}"
                                 + stays)
            self.failed = got.reason
            return
        old_held, self.held, self.failed = self.held, (got, why, cause), ""
        if old_held is not None:
            os.close(old_held[0])
        self.log.notice(f"watch: sleep blocked while the guard would veto: {why}")

    def prepare(self) -> None:
        """Watch the nodes known now and the state folder before a look, so that an open or a
        switch during it is read after it."""
        self.follow(self.known() if self.known is not None
                    else self.last.nodes if self.last is not None else ())
        if self.switches is not None and self.state_dir is not None:
            there = os.path.isdir(self.state_dir)
            self.switches.watch([self.state_dir if there else os.path.dirname(self.state_dir)])

    def follow(self, nodes: tuple[str, ...],
               holders: tuple[tuple[int, int], ...] | None = None) -> None:
        """Watch these nodes, and these holders' exits (None: the holders followed stay)."""
        if self.inotify is not None:
            failed = set(self.inotify.watch(nodes))
            for line in sorted(failed - self.unwatched):
                self.log.info(f"watch: not watched: {line}")
            self.unwatched = failed
        if holders is None:
            return
        wanted = set(holders[:MAX_PIDFDS])
        for fd, holder in list(self.pidfds.items()):
            if holder not in wanted:
                os.close(fd)
                del self.pidfds[fd]
        have = set(self.pidfds.values())
        for pid, start in wanted - have:
            got = pidfd_of(self.proc, pid, start)
            if got is not None:
                self.pidfds[got] = (pid, start)

    def status(self) -> str:
        if not self.mode.enforcing:
            would = (f"; enforced, it would block: {self.last.why}"
                     if self.last is not None and self.last.why is not None else "")
            return f"no block: the guard's mode is {self.mode.name} (suspendguard mode){would}"
        if self.held is not None and not self.failed:
            return f"blocking sleep: {self.held[1]}"
        if self.failed and self.last is not None and self.last.why is not None:
            if self.held is not None:  # a new reason's block refused: the old one still blocks
                return (f"blocking sleep: {self.last.why} (logind refused the new block "
                        f"({self.failed}): the one held still says: {self.held[1]})")
            return (f"the guard would veto, but logind refused the block ({self.failed}): "
                    f"{self.last.why}")
        if self.last is not None and self.last.verdict.kind == "unknown":
            return ("no block: the guard cannot tell (" +
                    "; ".join(self.last.verdict.texts[:1]) + ")")
        return "no block: the guard would not veto a suspend now"

    def close(self) -> None:
        self.hold(None)
        for watcher in (self.inotify, self.switches):
            if watcher is not None:
                watcher.close()
        for fd in self.pidfds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pidfds.clear()
        self.notifier.close()


def _cpu_s() -> float:
    """This process's CPU seconds so far, its reaped children's (the scan's workers) included."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def watch(config: Config, environ: Mapping[str, str], err: TextIO,
          recheck_s: float = RECHECK_S, debounce_s: float = DEBOUNCE_S,
          proc: ProcFS | None = None, take: Take = logind_take,
          look: Look | None = None) -> int:
    """Run the watch until SIGTERM, SIGINT or SIGHUP; 0 then (the block released)."""
    proc = proc or ProcFS()
    cancel = Cancel()
    w = Watch(look or dry_look(config, environ, proc), take, Notifier(environ),
              Logger(err, environ), proc, recheck_s=recheck_s, debounce_s=debounce_s,
              state_dir=config.state.dir,
              known=lambda: tuple(n.path for n in take_inventory(config.devices).nodes))

    def handler(signum: int, _frame: FrameType | None) -> None:
        cancel.cancel(f"watch received {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        w.run(cancel)
        w.notifier.send(STOPPING="1", STATUS="stopping")
    finally:
        w.close()
        for s, h in old.items():
            signal.signal(s, h)
        cancel.close()
    return 0

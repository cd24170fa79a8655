"""The controller's side: Slurm's SuspendProgram and ResumeProgram, and the exclusion kept up to date.

slurmctld runs them as SlurmUser with no PATH and its standard streams
closed, so each line also goes to the journal (``SYSLOG_IDENTIFIER=
suspendguard-slurm``). In Slurm 22.05 a node cannot refuse a suspend: it
is POWERING_DOWN from the program's start, and a drain does not keep an
idle node from being chosen again. So a node whose guard refuses is, in
this order: set RESUME (POWERING_DOWN becomes POWERED_DOWN at once),
drained with the guard's reason, written into the SuspendExcNodes file and
slurmctld re-reads its configuration, and then asked to restart slurmd,
whose registration brings it back up (DRAINED, not chosen again). Once
``slurm health`` on the node resumes it, :func:`sync` drops it from the
file and Slurm may suspend it again.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from suspendguard.config.cluster import SlurmConfig
from suspendguard.slurm.exclusion import exclusion_lock, sync_file
from suspendguard.slurm.remote import (
    NoAnswer,
    ask,
    joined,
    ours,
    reasons_of,
    slurm_reason,
    template,
    unenforced,
)
from suspendguard.slurm.scontrol import Node, Scontrol, SlurmError
from suspendguard.system import journald, runner
from suspendguard.system.log import ERR, INFO, WARNING, Logger
from suspendguard.verdict import Reason

IDENTIFIER = "suspendguard-slurm"
T = TypeVar("T")
RETRY_PAUSE_S = 3.0  # between the questions to a node that is waking
REGISTER_S = 5.0  # a held node's slurmd registers by itself at the re-read of the config
REGISTER_AFTER_RESTART_S = 30.0
AT_ONCE = 128  # nodes asked, woken or waited for at the same time (each a child, its pipes)
# A held node's reason, read before its drain replaces it, and the drain: asked again when
# scontrol failed (slurmctld busy with many nodes at once answers late).
SCONTROL_TRIES, SCONTROL_PAUSE_S = 3, 1.0
# A held node's reason when the one it had could not be read: not the guard's, so
# nothing the guard does lifts the drain (it may have replaced a maintenance drain).
UNREAD = "earlier reason unknown, scontrol show node failed"
# A node drained with no reason: Slurm 22.05 frees the reason of a drained node at a
# power-save wake and when a powered-down node registers, the DRAIN kept. Whose the drain
# was is gone with it: it is held as somebody else's, never lifted by the guard.
UNSAID = "drained already, its reason dropped by Slurm"
# The flags of a node whose slurmd has not registered since a power-down (or answers not).
POWER_SAVING = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "NOT_RESPONDING"})
# What slurmctld says of a node by itself, and takes back by itself when the node answers.
SLURMCTLD_OWN = ("Not responding",)
REFUSED = "Invalid node state specified"  # to RESUME a node not powering down, drained nor DOWN


def going_down(node: Node) -> bool:
    """Whether Slurm still counts ``node`` going down: POWERING_DOWN, or POWERED_DOWN with no
    job placed on it and not being woken."""
    if "POWERING_UP" in node.flags:
        return False
    if "POWERING_DOWN" in node.flags:
        return True
    busy = node.state in ("ALLOCATED", "MIXED") or "COMPLETING" in node.flags
    return "POWERED_DOWN" in node.flags and not busy


@dataclass
class Controller:
    config: SlurmConfig
    log: Logger
    local: str  # this host's node name: asked directly
    synced: bool = True  # False once a sync of the exclusion file failed (said at ERR)
    drained: bool = True  # False once scontrol did not take a drain (said at ERR)

    @property
    def scontrol(self) -> Scontrol:
        return Scontrol(self.config.scontrol)

    def say(self, priority: int, line: str) -> None:
        self.log.log(priority, line)
        self.journal(priority, line)

    def journal(self, priority: int, line: str) -> None:
        """``line`` in the journal alone: slurmctld keeps no program's stderr. Under systemd
        (the sync timer's service) stderr is the journal already: sent once, there."""
        if self.log.journal:
            return
        journald.send({"MESSAGE": line, "PRIORITY": str(priority),
                       "SYSLOG_IDENTIFIER": IDENTIFIER})

    def ask(self, node: str, *args: str, timeout: float | None = None) -> dict[str, Any] | NoAnswer:
        """The node's answer. This host's own guard is asked directly only when this runs
        as root: slurmctld runs the programs as SlurmUser, as whom the guard can neither
        see nor drain other users' processes, nor restart slurmd; through ``[slurm]
        remote`` (root@{node}) it runs as root, as on every other node."""
        local = node == self.local and os.geteuid() == 0
        return ask(self.config, node, args, local=local, timeout=timeout)

    def each(self, nodes: Sequence[str], step: Callable[[str], bool]) -> bool:
        """``step`` for every node, AT_ONCE at a time (a child each, its pipes); True when all were.

        A call names up to SuspendRate or ResumeRate nodes (60 and 300 a minute by default,
        0 no bound): one past the first AT_ONCE waits for a step to end, and may be asked
        past SuspendTimeout or ResumeTimeout. A node to suspend is read again first."""
        if not nodes:
            return True
        with ThreadPoolExecutor(max_workers=min(AT_ONCE, len(nodes))) as pool:
            return all(list(pool.map(step, nodes)))

    # -- SuspendProgram ---------------------------------------------------------

    def suspend(self, nodes: Sequence[str]) -> bool:
        self.sync()  # what health resumed since the last look goes out of the file first
        return self.each(nodes, self._suspend_one)

    def _suspend_one(self, node: str) -> bool:
        by_itself = not self.config.power_off
        # Read first: past SuspendTimeout (the sync's lock, a wait behind AT_ONCE others) a job
        # Slurm placed on the node would be drained by prepare as outside Slurm.
        now = self._node(node)
        if now is not None and not going_down(now):
            self.say(WARNING, f"{node}: left to Slurm: no longer powering down "
                     f"({'+'.join([now.state, *sorted(now.flags)])}); its guard not asked")
            return False
        got = self.ask(node, "prepare", *(["--suspend"] if by_itself else []))
        if isinstance(got, NoAnswer):
            return self.hold(node, got.reason(), reachable=False)
        if got.get("verdict") != "allow":
            reasons = reasons_of(got) or [Reason("node-unreachable",
                                                 f"{node} gave no reason with its verdict")]
            return self.hold(node, reasons[0])
        if said := unenforced(node, got):
            self.say(*said)
        if by_itself:
            self.say(INFO, f"{node}: the guard allowed; the node suspends itself")
            return True
        # Read again: the sync before the question and the node's drain may have taken
        # past SuspendTimeout, and a job may have been placed on the node since.
        now = self._node(node)
        if now is None or not going_down(now):
            self._start_again(node, got.get("attempt"))
            if now is None:
                return self.hold(node, Reason("power-action-failed", "[slurm] power_off not "
                                              "run: the node's state could not be read"))
            self.say(WARNING, f"{node}: not powered off: Slurm no longer counts it going down "
                     f"({'+'.join([now.state, *sorted(now.flags)])}); left to Slurm, whose "
                     "ResumeProgram checks a node it wakes")
            return False
        off = runner.run(template(self.config.power_off, node), self.config.timeout_s)
        if not off.ok:
            self._start_again(node, got.get("attempt"))
            return self.hold(node, Reason("power-action-failed",
                                          f"[slurm] power_off: {off.describe_failure()}"))
        self.say(INFO, f"{node}: the guard allowed; powered off")
        return True

    def _start_again(self, node: str, attempt: Any) -> None:
        """The node stays up after its drain: the jobs it stopped through their supervisors
        are started again, as after a veto (no resume will come to do it)."""
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt <= 0:
            return  # observe or off mode: nothing was stopped
        got = self.ask(node, "restart", "--attempt", str(attempt))
        if isinstance(got, NoAnswer) or got.get("verdict") != "allow":
            why = got.why if isinstance(got, NoAnswer) else "its history could not say"
            self.say(ERR, f"{node}: the jobs its drain stopped were not started again ({why}); "
                     f"start them on the node: suspendguard restore")
        elif got.get("started"):
            self.say(INFO, f"{node}: started again what its drain stopped: "
                     f"{', '.join(map(str, got['started']))}")

    def hold(self, node: str, reason: Reason, reachable: bool = True) -> bool:
        """The node kept up, drained with the guard's reason, out of Slurm's choice."""
        self.say(WARNING, f"{node}: not powered down: {slurm_reason(reason)}")
        text = self._drain_reason(node, reason)
        try:  # POWERING_DOWN -> POWERED_DOWN at once
            self._tried(node, lambda: self.scontrol.update(node, "RESUME"), settled=REFUSED)
        except SlurmError as exc:
            if REFUSED in str(exc):
                self.say(INFO, f"{node}: not set RESUME ({exc}): it was not powering down")
            else:
                self.say(ERR, f"{node}: not set RESUME: {exc}; Slurm counts it powering down "
                         "until SuspendTimeout")
        if not self.drain(node, text):
            return False
        # The file names the node before its drain reason is certain (below).
        self.sync(also=(node,))
        # Slurm forgets the reason of a powered-down node that registers (the DRAIN
        # stays): given again once it did, so that sinfo -R says why and sync keeps the
        # node out. A node whose guard did not answer is not asked to restart slurmd; its
        # slurmd may still register at the re-read of the configuration.
        up = self.registered(node, ("rejoin",)) if reachable else self._up_within(node, REGISTER_S)
        if up:
            self.drain(node, text)
        return False

    def _drain_reason(self, node: str, reason: Reason) -> str:
        """The reason the guard drains ``node`` with, read against the one it has.

        Somebody else's drain (maintenance, NHC) is theirs to lift: it is kept, the
        guard's reason added after it, and health never resumes the node. slurmctld's own
        "Not responding" (Slurm 22.05 suspends a DOWN node too) is nobody's to lift: the
        guard's replaces it, or the node would stay held after its holder left. One that
        could not be read may be such a drain: the guard's drain replaces it, so the
        node is held as somebody else's, never resumed by the guard.
        """
        text = slurm_reason(reason)
        now = self._node(node)
        if now is None:
            self.say(ERR, f"{node}: its reason could not be read before the drain, which "
                     "replaces any reason it had: held as not the guard's to lift (slurm "
                     f"health never resumes it); see sinfo -R and the slurmctld log, and "
                     f"lift it by hand (scontrol update NodeName={node} State=RESUME)")
            return joined(UNREAD, text)
        before = now.reason or (UNSAID if now.drained else "")
        kept = before and not ours(before) and before not in SLURMCTLD_OWN
        return joined(before, text) if kept else text

    def _node(self, node: str) -> Node | None:
        """The node as scontrol shows it now; None when it could not say."""
        try:
            return self._tried(node, lambda: self.scontrol.node(node))
        except SlurmError as exc:
            self.say(ERR, f"{node}: {exc}")
            return None

    def drain(self, node: str, text: str) -> bool:
        """``node`` drained with ``text``. A failure is said with the command that drains
        it by hand: after the hold's RESUME, which lifted any drain the node had, an
        earlier drain (maintenance) lives on only in ``text``."""
        try:
            self._tried(node, lambda: self.scontrol.update(node, "DRAIN", text))
        except SlurmError as exc:
            self.say(ERR, f"{node}: could not be drained: {exc}; drain it by hand: scontrol "
                     f"update NodeName={node} State=DRAIN Reason={shlex.quote(text)}")
            self.drained = False
            return False
        return True

    def _tried(self, node: str, call: Callable[[], T], settled: str = "") -> T:
        """``call``'s value, asked up to SCONTROL_TRIES times, each failure but the last
        said; the last one raised, and at once one whose words hold ``settled``."""
        for _ in range(SCONTROL_TRIES - 1):
            try:
                return call()
            except SlurmError as exc:
                if settled and settled in str(exc):
                    raise
                self.say(ERR, f"{node}: {exc}; asked again")
            time.sleep(SCONTROL_PAUSE_S)
        return call()

    def registered(self, node: str, restart: Sequence[str]) -> bool:
        """Wait for ``node``'s slurmd to register (no longer powered down in Slurm's eyes),
        asking the node to restart it (``slurm node`` RESTART) if it does not by itself."""
        if self._up_within(node, REGISTER_S):
            return True
        back = self.ask(node, *restart)
        if isinstance(back, NoAnswer) or back.get("verdict") != "allow":
            self.say(ERR, f"{node}: slurmd was not restarted: "
                     + (back.why if isinstance(back, NoAnswer)
                        else "; ".join(back.get("reasons") or ())))
            return False
        if not self._up_within(node, REGISTER_AFTER_RESTART_S):
            self.say(ERR, f"{node}: slurmd restarted but has not registered in "
                     f"{REGISTER_AFTER_RESTART_S:g} s")
            return False
        return True

    def _up_within(self, node: str, seconds: float) -> bool:
        until = time.monotonic() + seconds
        while True:
            try:
                flags = self.scontrol.node(node).flags
            except SlurmError:
                flags = frozenset({"POWERED_DOWN"})
            if not flags & POWER_SAVING:
                return True
            if time.monotonic() > until:
                return False
            time.sleep(0.5)

    # -- ResumeProgram -----------------------------------------------------------

    def resume(self, nodes: Sequence[str]) -> bool:
        # Every node woken first: a node's boot never waits for another's check.
        if self.config.power_on:
            self.each(nodes, self._power_on)
        return self.each(nodes, self._resume_one)

    def _power_on(self, node: str) -> bool:
        on = runner.run(template(self.config.power_on, node), self.config.timeout_s)
        if not on.ok:
            self.say(WARNING, f"{node}: [slurm] power_on: {on.describe_failure()}")
        return on.ok

    def _resume_one(self, node: str) -> bool:
        until = time.monotonic() + self.config.resume_wait_s
        while True:
            left = until - time.monotonic()
            got = self.ask(node, "awake", timeout=max(1.0, min(self.config.timeout_s, left)))
            if not isinstance(got, NoAnswer) or time.monotonic() + RETRY_PAUSE_S > until:
                break
            time.sleep(RETRY_PAUSE_S)
        if isinstance(got, NoAnswer):
            self.say(ERR, f"{node}: not awake within [slurm] resume_wait_s "
                     f"({self.config.resume_wait_s:g} s): {got.why}; Slurm marks it DOWN "
                     "at ResumeTimeout")
            return False
        # unknown (a device's health could not be read) holds the node back no more than the
        # check after resume holds a host's jobs: it is said, and the node rejoins.
        unknown = got.get("verdict") == "unknown"
        healthy = unknown or got.get("verdict") == "allow"
        if unknown:
            self.say(WARNING, f"{node}: its accelerator's health after the wake is unknown: "
                     + "; ".join(got.get("reasons") or ("no reason given",)))
        text = ""
        if not healthy:
            reasons = reasons_of(got) or [Reason("unhealthy-after-resume", "device unhealthy")]
            text = self._drain_reason(node, reasons[0])
            # Drained while POWERING_UP: Slurm requeues the job that woke it (or ends it
            # as a node failure when it cannot be requeued).
            if not self.drain(node, text):
                # Registered undrained, the node would run that job on the device (or
                # beside its holder): left to ResumeTimeout instead, which marks it DOWN
                # and requeues the job.
                self.say(ERR, f"{node}: unfit after its wake ({reasons[0].code}) and not "
                         "drained: slurmd not restarted; Slurm marks it DOWN at ResumeTimeout")
                return False
            self.say(WARNING, f"{node}: drained after its wake: {text}")
            self.sync(also=(node,))
        up = self._rejoin(node, until)
        if up is None:
            return False
        if not healthy:
            self.drain(node, text)  # its reason, forgotten at the registration, given again
            return False
        health = "its health unknown" if unknown else "healthy"
        self.say(INFO if up else WARNING, f"{node}: awake and {health}; slurmd "
                 + ("registered" if up else "not registered in the time given it"))
        return up

    def _rejoin(self, node: str, until: float) -> bool | None:
        """Whether ``node``'s slurmd registered, restarted with -b where the node only slept;
        None when it was not restarted. A restart with -b reports a reboot: to a node
        registered already, which may run jobs, an unexpected one (the node DOWN, its jobs
        killed). So a node powered off ([slurm] power_off), which boots and registers by
        itself, and one whose state could not be read are only waited for: the time left of
        [slurm] resume_wait_s, at least REGISTER_AFTER_RESTART_S."""
        try:
            now: Node | None = self._tried(node, lambda: self.scontrol.node(node))
        except SlurmError as exc:
            self.say(ERR, f"{node}: its state could not be read ({exc}): slurmd not restarted "
                     "with -b, which would take a node registered meanwhile for rebooted; "
                     "waiting for it to register")
            now = None
        if now is not None and not now.flags & POWER_SAVING:
            self.say(INFO, f"{node}: slurmd registered by itself: not restarted")
            return True
        if now is not None and not self.config.power_off:
            back = self.ask(node, "rejoin", "--boot")
            if isinstance(back, NoAnswer) or back.get("verdict") != "allow":
                self.say(ERR, f"{node}: slurmd was not restarted with -b: "
                         + (back.why if isinstance(back, NoAnswer)
                            else "; ".join(back.get("reasons") or ())))
                return None
            return self._up_within(node, REGISTER_AFTER_RESTART_S)
        return self._up_within(node, max(REGISTER_AFTER_RESTART_S, until - time.monotonic()))

    # -- SuspendExcNodes ----------------------------------------------------------

    def sync(self, also: Sequence[str] = ()) -> bool:
        """The exclusion file made to name the nodes the guard holds (and ``[slurm] exclude``,
        and ``also``); slurmctld re-reads its configuration when that changed. False when a
        step failed (said at ERR). With no ``[slurm] exclude_file`` (Slurm 23.02+ with
        ``SuspendExcStates=DRAIN``) nothing is kept."""
        if not self.config.exclude_file:
            return True
        path = Path(self.config.exclude_file)
        try:
            # One listing and write at a time: a listing taken before another run's drain
            # must not be written over the file that names the node drained meanwhile.
            with exclusion_lock(path):
                done = sync_file(path, self.config.exclude, also, self.scontrol, self.say)
        except OSError as exc:
            self.say(ERR, f"{path}: not written: {exc.strerror or exc}")
            done = False
        self.synced = self.synced and done
        return done

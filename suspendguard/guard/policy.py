"""Decide, before any signal, what the guard does with each holder and why.

The rules ([policy] protect and ignore, the built-in ones) say whether a
holder is the guard's business; its cgroup and its signal masks then say
whether the drain signal can end it. Each answer is a ``Decision`` whose
kind says what follows: drain it, leave it, or veto before anyone is
signalled.
"""

from __future__ import annotations

import fnmatch
import os
import re
import signal
from collections.abc import Collection, Iterable, Sequence

from suspendguard.config import DrainConfig, PolicyConfig, Rule
from suspendguard.guard.identity import (
    NOTHING_VOUCHED,
    PROBE_MODULE,
    Vouched,
    daemon_named,
    names_probe,
)
from suspendguard.model import (
    Action,
    Decision,
    DecisionKind,
    Disposition,
    Holder,
    HolderId,
    holder_id,
)
from suspendguard.system.procfs import ProcAccessError, ProcFS

# Handlers of fatal signals that only report and then die as the signal
# would, so never free device resources behind the driver's back. In Python:
# faulthandler's set (a traceback, then re-raise), and the one PyTorch's
# DataLoader workers install (_set_worker_signal_handlers: the cause, then
# the default action). In any rank of Open MPI, whatever its language: its
# MCA opal_signal default, "6,7,8,11" ("display a stack trace and abort").
_REPORT_ONLY_SETS = (frozenset({"SIGSEGV", "SIGFPE", "SIGABRT", "SIGBUS", "SIGILL"}),
                     frozenset({"SIGSEGV", "SIGFPE", "SIGBUS"}))
_OPEN_MPI_SET = frozenset({"SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV"})
_RUNTIMES_THAT_CATCH_BY_DESIGN = ("java", "node")

# The built-in exemption of a holder of management nodes only: the one "ignore" that a
# device's own process list may overrule (guard/device_view.py).
MANAGEMENT_ONLY = "holds management nodes only (monitoring/management tool)"


def rule_matches(rule: Rule, holder: Holder) -> bool:
    if rule.comm is not None and rule.comm != holder.comm:
        return False
    if rule.uid is not None and rule.uid != holder.uid:
        return False
    # A binary replaced while it runs (an upgrade) reads "PATH (deleted)": still that program.
    if rule.exe is not None and not fnmatch.fnmatchcase(
            holder.exe.removesuffix(" (deleted)"), rule.exe):
        return False
    if rule.cmdline is not None and not re.search(rule.cmdline, " ".join(holder.cmdline)):
        return False
    if rule.user is not None and rule.user not in (holder.user, str(holder.uid)):
        return False
    return rule.unit is None or (
        holder.unit is not None and fnmatch.fnmatchcase(holder.unit, rule.unit)
    )


def ancestors(pid: int) -> frozenset[int]:
    """``pid`` and every process above it (the guard and whoever started it)."""
    proc = ProcFS()
    out = {pid}
    while True:
        try:
            st = proc.stat(pid)
        except ProcAccessError:
            break
        if st is None or st.ppid <= 0 or st.ppid in out:
            break
        pid = st.ppid
        out.add(pid)
    return frozenset(out)


def fatal_signal_note(holder: Holder) -> str | None:
    """Case 3 of the vendor notes: handlers for fatal signals may break driver cleanup."""
    caught = frozenset(holder.fatal_handlers)
    if not caught:
        return None
    name = os.path.basename(holder.exe) or holder.comm
    if (name.startswith("python") and caught in _REPORT_ONLY_SETS) or caught == _OPEN_MPI_SET:
        return None  # harmless by design
    if name in _RUNTIMES_THAT_CATCH_BY_DESIGN:
        return None
    return (
        f"catches fatal signals ({', '.join(sorted(caught))}); if its handler frees device "
        "resources, that breaks the driver's own cleanup"
    )


def _never(holder: Holder, protected_pids: frozenset[int]) -> str | None:
    if holder.pid == 1:
        return "PID 1 is never signalled"
    if holder.pid in protected_pids:
        return "the guard itself or one of its ancestors"
    return None


def decide(
    holders: Iterable[Holder],
    policy: PolicyConfig,
    drain: DrainConfig,
    *,
    never_pids: frozenset[int] = frozenset(),
    respawned: Collection[HolderId] = (),
    vouched: Vouched = NOTHING_VOUCHED,
) -> list[Decision]:
    """One decision per holder, in order.

    ``respawned``: holders a supervisor restarted during the drain; their
    reasons say so. ``vouched``: what guard/identity.py proved of holders
    that claim a built-in exemption; one it did not prove gets none.
    """
    decisions = []
    for holder in holders:
        action, rule, doubt = _action(holder, policy, never_pids, vouched)
        notes = tuple(n for n in (doubt, fatal_signal_note(holder)) if n)
        i = _first(policy.protect, holder) if action == "protect" else None
        if i is not None and policy.protect[i].forgeable:
            notes += ("the rule that protects it matches by name or command line alone, which "
                      "any user's process can set",)
        if holder.frozen:
            notes += ("its cgroup is frozen: a signal stays pending until it is thawed",)
        elif holder.stopped:
            notes += ("it is stopped: a signal stays pending until it continues",)
        label = f"pid {holder.pid} {holder.comm}"
        if holder_id(holder) in respawned:
            label += " (respawned)"
        kind, reason = _kind(holder, action, rule, drain, label)
        decisions.append(Decision(holder, action, rule, drain.signal, wait_for(holder, policy, drain),
                                  notes, kind, reason))
    return decisions


def wait_for(holder: Holder, policy: PolicyConfig, drain: DrainConfig) -> float:
    """The wait after the signal this holder is given: the first [[policy.drain]] rule's that
    matches it, or [drain] timeout_s."""
    for rule in policy.drain:
        if rule_matches(rule.match, holder):
            return rule.timeout_s
    return drain.timeout_s


def _kind(holder: Holder, action: Action, rule: str, drain: DrainConfig,
          label: str) -> tuple[DecisionKind, str]:
    """What follows from the rule's action, the holder's cgroup and its signal masks."""
    if action == "protect":
        return "protect", (f"{label} is protected by {rule}: veto while it runs; stop it "
                           "before suspending, or change the rule")
    if action == "never" and "compute" in holder.roles and holder.pid != os.getpid():
        # Never signalled, and no drain of this run can end it: it would hold the device
        # through the sleep (a notebook that runs `suspendguard drain`, say).
        return "veto-never", (f"{label} holds a compute node but is never signalled ({rule}): "
                              "this run cannot stop it; stop it yourself, or run the guard "
                              "from outside it")
    if action in ("ignore", "never", "keep"):
        return "leave", ""
    if holder.frozen:
        return "veto-frozen", (f"{label} is in a frozen cgroup: it cannot exit until thawed; "
                               + _thaw_step(holder))
    if holder.stopped:
        return "veto-stopped", stopped_reason(label, holder.pid, holder.stopped)
    disposition = drain_disposition(holder, drain.signal)
    if disposition not in ("ignored", "blocked"):
        return "drain", ""
    # A signal that can never arrive is as good as ignored: [drain] on_sigint_ignored says.
    kind: DecisionKind = "veto-sigint-ignored" if disposition == "ignored" else "veto-sigint-blocked"
    reason = sigint_ignored_reason if disposition == "ignored" else sigint_blocked_reason
    if drain.on_sigint_ignored == "veto":
        return kind, reason(holder, drain.signal, "")
    if drain.on_sigint_ignored == "escalate":
        if not drain.escalate:
            return kind, reason(
                holder, drain.signal, "[drain] on_sigint_ignored is escalate but [drain] "
                "escalate is empty: add steps such as \"SIGTERM:10\"")
        return "escalate", ""
    return "drain", ""  # signal-anyway


def drain_disposition(holder: Holder, signame: str) -> Disposition:
    """How the holder takes the drain signal, before anyone is signalled.

    The scan looked at every thread for SIGINT (another thread, sigwait, a
    signalfd may take it where the main thread blocks it; every live thread
    blocks it where the main one has exited); any other signal the main
    thread blocks may still reach a thread that takes it.
    """
    signum = signal.Signals[signame]
    disposition = holder.disposition(signum)
    if signum == signal.SIGINT and disposition != "ignored" and "blocked" in (
            disposition, holder.sigint):
        return holder.sigint
    return "unknown" if disposition == "blocked" else disposition


def _thaw_step(holder: Holder) -> str:
    """How to thaw a frozen holder: its v1 freezer's file, or systemd's unit, else the cgroup's."""
    if holder.thaw.endswith("freezer.state"):
        return f"thaw it (echo THAWED > {holder.thaw}) or stop it"
    if holder.unit:
        return f"thaw it (systemctl thaw {holder.unit}) or stop it"
    if holder.thaw:
        return f"thaw it (echo 0 > {holder.thaw}) or stop it"
    return "thaw it (systemctl thaw UNIT) or stop it"


def _stopped_how(state: str) -> str:
    return "stopped by a debugger (state t)" if state == "t" else "stopped (SIGSTOP, state T)"


def stopped_reason(label: str, pid: int, state: str, when: str = "") -> str:
    """Why a stopped holder ("T" or "t") vetoes unsignalled, and what to do; ``when``: the
    moment it was found so, if not now."""
    now = f"was {_stopped_how(state)} {when}" if when else f"is {_stopped_how(state)}"
    return (f"{label} {now}: a signal would stay pending and end it when it continues, after "
            "this suspend was refused; "
            + ("detach the debugger" if state == "t" else f"continue it (kill -CONT {pid})")
            + " or stop it yourself, then suspend again")


def sigint_ignored_reason(holder: Holder, signame: str, next_step: str = "") -> str:
    """Why a holder that ignores the drain signal vetoes, and what to do about it."""
    num = int(signal.Signals[signame])
    # SigIgn alone cannot tell who set it: the program, or a parent before exec.
    why = ("set by the program, or inherited from a parent that ignored it, e.g. `&` in a "
           "script or nohup")
    step = next_step or (f"stop it yourself (kill -TERM {holder.pid}), start it so it takes "
                         f"{signame}, or set [drain] on_sigint_ignored")
    if holder.namespace_init and not holder.sig_masks.ignored & (1 << (num - 1)):
        why = ("it is PID 1 of its container's PID namespace and has no handler for it: the "
               "kernel drops such a signal sent from outside")
        step = next_step or ("start its container with an init (docker run --init, podman run "
                             f"--init) or have the program handle {signame}; or stop the "
                             "container yourself, or set [drain] on_sigint_ignored")
    return (f"pid {holder.pid} {holder.comm} ignores {signame} ({why}): kill -{num} cannot "
            f"stop it; {step}")


def sigint_blocked_reason(holder: Holder, signame: str, next_step: str = "") -> str:
    """Why a holder the drain signal can never reach vetoes, and what to do about it."""
    num = int(signal.Signals[signame])
    step = next_step or (f"stop it yourself (kill -TERM {holder.pid}) or through its own tool "
                         "(ray stop, for Ray), or set [drain] on_sigint_ignored")
    return (f"pid {holder.pid} {holder.comm} has {signame} blocked in every thread and nothing "
            f"waits for it (no sigwait, no signalfd), as Ray's daemons start: kill -{num} can "
            f"never reach it; {step}")


def _first(rules: Sequence[Rule], holder: Holder) -> int | None:
    for i, rule in enumerate(rules):
        if rule_matches(rule, holder):
            return i
    return None


def _action(
    holder: Holder, policy: PolicyConfig, never_pids: frozenset[int], vouched: Vouched
) -> tuple[Action, str, str]:
    """The action, the rule that decided it, and why a built-in exemption it claims fails."""
    why = _never(holder, never_pids)
    if why:
        return "never", why, ""
    i = _first(policy.protect, holder)
    if i is not None:
        return "protect", f"[policy] protect #{i + 1} ({policy.protect[i].describe()})", ""
    i = _first(policy.ignore, holder)
    if i is not None:
        return "ignore", f"[policy] ignore #{i + 1} ({policy.ignore[i].describe()})", ""
    key = holder_id(holder)
    doubt = ""
    if names_probe(holder):
        # The probe holds the device well under a second and exits by itself;
        # draining it would only race its own finalize.
        if key in vouched.probes:
            return "ignore", ("suspendguard's own short-lived pyACL probe (its parent, "
                              "another guard run, holds this state folder's guard.lock)"), ""
        doubt = (f"suspendguard's own pyACL probe, but {vouched.stuck_probes[key]}"
                 if key in vouched.stuck_probes else
                 f"its command line names {PROBE_MODULE}, but its parent (pid {holder.ppid}) "
                 "is no suspendguard run on this state folder: not exempt")
    named = daemon_named(holder)
    if named is not None:
        daemon_why = vouched.daemons.get(key, f"named {named[0]}, but not checked: not exempt")
        if not daemon_why:
            return "ignore", f"built-in: {named[1]} driver daemon {named[0]}", ""
        doubt = daemon_why
    if holder.source != "proc" and "compute" not in holder.roles:
        # Seen by the device, not (or not as compute work) by the scan.
        return "drain", f"reported by the device ({holder.source})", doubt
    if "compute" not in holder.roles:
        if "graphics" in holder.roles:
            return "keep", ("graphics client: holds NVIDIA nodes but not /dev/nvidia-uvm (no "
                            "CUDA); the driver's own suspend path keeps its state"), doubt
        return "ignore", MANAGEMENT_ONLY, doubt
    return "drain", "holds a compute node", doubt


# What any user gains from a rule that matches by name or command line alone.
_FORGED = {
    "protect": "any user can veto every suspend with it",
    "ignore": "any user's job can match it and run on through the suspend",
}


def forgeable_rule_warnings(policy: PolicyConfig) -> list[str]:
    """One warning per rule any user's process can match (check's output and the journal)."""
    out = []
    for kind, rules in (("protect", policy.protect), ("ignore", policy.ignore)):
        out += [f"[policy] {kind} #{i + 1} ({r.describe()}) matches by name or command line "
                f"alone, which any user's process can set: {_FORGED[kind]}; add uid, user, "
                "unit or exe" for i, r in enumerate(rules) if r.forgeable]
    return out

"""Decide, for each holder, what the guard does with it and by which rule."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from suspendguard.config import PolicyConfig, Rule
from suspendguard.guard.inventory import FAMILY_DAEMONS
from suspendguard.model import Decision, Holder
from suspendguard.system.procfs import ProcFS

if TYPE_CHECKING:
    from suspendguard.model import Action

# Python's faulthandler installs exactly these; it dumps a traceback and
# re-raises, so it never frees device resources behind the driver's back.
_FAULTHANDLER_SET = frozenset({"SIGSEGV", "SIGFPE", "SIGABRT", "SIGBUS", "SIGILL"})
_RUNTIMES_THAT_CATCH_BY_DESIGN = ("java", "node")


def rule_matches(rule: Rule, holder: Holder) -> bool:
    if rule.comm is not None and rule.comm != holder.comm:
        return False
    if rule.exe is not None and not fnmatch.fnmatchcase(holder.exe, rule.exe):
        return False
    if rule.cmdline is not None and not re.search(rule.cmdline, " ".join(holder.cmdline)):
        return False
    if rule.user is not None and rule.user not in (holder.user, str(holder.uid)):
        return False
    return rule.unit is None or (
        holder.unit is not None and fnmatch.fnmatchcase(holder.unit, rule.unit)
    )


def ancestors(pid: int, proc: ProcFS) -> frozenset[int]:
    """``pid`` and every process above it (the guard and whoever started it)."""
    out = set()
    while pid > 0 and pid not in out:
        out.add(pid)
        try:
            st = proc.stat(pid)
        except Exception:
            break
        if st is None:
            break
        pid = st.ppid
    return frozenset(out)


def fatal_signal_note(holder: Holder) -> str | None:
    """Case 3 of the vendor notes: handlers for fatal signals may break driver cleanup."""
    caught = frozenset(holder.fatal_handlers)
    if not caught:
        return None
    name = os.path.basename(holder.exe) or holder.comm
    if name.startswith("python") and caught == _FAULTHANDLER_SET:
        return None  # faulthandler: harmless by design
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
    never_pids: frozenset[int] = frozenset(),
) -> list[Decision]:
    decisions = []
    daemons = {comm: fam for fam, comms in FAMILY_DAEMONS.items() for comm in comms}
    for holder in holders:
        notes = tuple(n for n in (fatal_signal_note(holder),) if n)
        if holder.frozen:
            notes += ("its cgroup is frozen: a signal stays pending until it is thawed",)
        decisions.append(Decision(holder, *_action(holder, policy, never_pids, daemons), notes))
    return decisions


def _is_own_probe(holder: Holder) -> bool:
    """A concurrent guard's pyACL child (e.g. the metrics timer's status run).

    It holds the device for well under a second and exits by itself;
    draining it would only race its own finalize.
    """
    return "suspendguard.idle.acl_probe" in holder.cmdline[:4]


def _first(rules: Sequence[Rule], holder: Holder) -> int | None:
    for i, rule in enumerate(rules):
        if rule_matches(rule, holder):
            return i
    return None


def _action(
    holder: Holder, policy: PolicyConfig, never_pids: frozenset[int], daemons: dict[str, str]
) -> tuple[Action, str]:
    why = _never(holder, never_pids)
    if why:
        return "never", why
    i = _first(policy.protect, holder)
    if i is not None:
        return "protect", f"[policy] protect #{i + 1} ({policy.protect[i].describe()})"
    i = _first(policy.ignore, holder)
    if i is not None:
        return "ignore", f"[policy] ignore #{i + 1} ({policy.ignore[i].describe()})"
    if _is_own_probe(holder):
        return "ignore", "suspendguard's own short-lived pyACL probe (of another guard run)"
    if holder.comm in daemons:
        return "ignore", f"built-in: {daemons[holder.comm]} driver daemon"
    if holder.source != "proc" and not holder.nodes:
        return "drain", f"reported by the device ({holder.source})"
    if "compute" not in holder.roles:
        return "ignore", "holds management nodes only (monitoring/management tool)"
    return "drain", "holds a compute node"

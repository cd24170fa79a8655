"""Whether a holder is what an exemption takes it for, judged by what it cannot set itself.

A process's name (``comm``) and its command line are its own to set: any
user can call a job ``slogd``, or put ``suspendguard.idle.acl_probe`` in its
arguments. Who runs it (the uid), and the file it executes (/proc/PID/exe,
with the owner and mode of that file and of every folder above it) are not.
So a built-in exemption holds only once these say so:

- a driver daemon: its executable is named as the daemon, is the very file
  at that path in the guard's own mount namespace, root may trust that path
  (config/trust.py: root's and only root's to change), and it runs as root
  or as a service user the driver's documentation names;
- the guard's own pyACL probe: its parent is a suspendguard run on the same
  state folder, proven by an open fd on that folder's guard.lock (a file of
  the guard's user alone, mode 0600), which every run keeps open while it
  may start a probe; and it is not in uninterruptible sleep (state D): a
  probe stuck in the driver does not exit by itself, as the exemption assumes.

What fails is said in words ("named slogd, but run by nobody from /tmp/x"),
and the holder is drained like any other.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from suspendguard.config import trust
from suspendguard.guard.inventory import DAEMON_USERS, FAMILY_DAEMONS
from suspendguard.model import Holder, HolderId, holder_id
from suspendguard.system.procfs import ProcAccessError, ProcFS

PROBE_MODULE = "suspendguard.idle.acl_probe"
# The kernel keeps 15 bytes of a name (TASK_COMM_LEN less its NUL):
# nvidia-persistenced shows as nvidia-persiste.
COMM_LEN = 15

# The lock file a run keeps open: (its path, (st_dev, st_ino)).
Token = tuple[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Vouched:
    """What the guard proved of holders that claim an exemption, by (pid, start time).

    ``daemons``: each holder named like a driver daemon, with "" when it is
    the daemon and otherwise why not. ``probes``: holders proven to be a
    suspendguard run's pyACL probe. ``stuck_probes``: a run's probe, by its parent's
    lock, that is not exempt all the same, with why (stuck in the driver).
    """

    daemons: Mapping[HolderId, str] = field(default_factory=dict)
    probes: frozenset[HolderId] = frozenset()
    stuck_probes: Mapping[HolderId, str] = field(default_factory=dict)


NOTHING_VOUCHED = Vouched()


def daemon_named(holder: Holder) -> tuple[str, str] | None:
    """(daemon, family) when the holder's name or executable's name is a driver daemon's."""
    base = os.path.basename(holder.exe.removesuffix(" (deleted)"))
    for family, names in FAMILY_DAEMONS.items():
        for name in names:
            if base == name or holder.comm == name[:COMM_LEN]:
                return name, family
    return None


def names_probe(holder: Holder) -> bool:
    """Its command line says it is the probe (``python -m suspendguard.idle.acl_probe``)."""
    return PROBE_MODULE in holder.cmdline[:4]


def vouch(holders: Iterable[Holder], proc: ProcFS, token: Token | None) -> Vouched:
    """Check each holder that claims an exemption; the others are not read again."""
    daemons: dict[HolderId, str] = {}
    probes: set[HolderId] = set()
    stuck: dict[HolderId, str] = {}
    for holder in holders:
        if holder.source != "proc":
            continue
        named = daemon_named(holder)
        if named is not None:
            daemons[holder_id(holder)] = daemon_doubt(holder, proc, *named)
        if token is not None and names_probe(holder) and holds_token(proc, holder.ppid, token):
            why = probe_doubt(proc, holder.pid)
            if why:
                stuck[holder_id(holder)] = why
            else:
                probes.add(holder_id(holder))
    return Vouched(daemons, frozenset(probes), stuck)


def probe_doubt(proc: ProcFS, pid: int) -> str:
    """Why a run's own probe is not the short-lived child its exemption takes it for; "" when
    it is. One in state D (a driver call that does not return) outlives even SIGKILL."""
    try:
        st = proc.stat(pid)
    except ProcAccessError:
        st = None
    if st is None:
        return "its /proc/PID/stat cannot be read: not exempt"
    if st.state == "D":
        return ("it is in uninterruptible sleep (state D): stuck in the driver, it does not exit "
                "by itself, so not exempt")
    return ""


def daemon_doubt(holder: Holder, proc: ProcFS, name: str, family: str) -> str:
    """Why ``holder`` is not the driver daemon ``name``; "" when it is."""
    users = DAEMON_USERS.get(family, ())
    why: list[str] = []
    if holder.uid != 0 and holder.user not in users:
        allowed = " or ".join(("root", *users))
        why.append(f"it runs as {holder.user}, not {allowed}")
    why += _exe_doubts(holder, proc, name)
    if not why:
        return ""
    exe = holder.exe or "an executable the guard cannot read"
    return (f"named {name}, but run by {holder.user} from {exe} ({'; '.join(why)}): not the "
            f"{family} driver's daemon, so not exempt")


def _exe_doubts(holder: Holder, proc: ProcFS, name: str) -> list[str]:
    exe = holder.exe
    if not exe:
        return ["its executable cannot be read"]
    if exe.endswith(" (deleted)"):
        return ["its executable has been deleted"]
    if os.path.basename(exe) != name:
        return [f"its executable is not named {name}"]
    running = proc.link_stat(holder.pid, "exe")
    try:
        here = os.stat(exe)
    except OSError:
        here = None
    if (running is None or here is None or
            (running.st_dev, running.st_ino) != (here.st_dev, here.st_ino)):
        # Another mount namespace (a container, or a user's own) shows its own
        # file at that path: the path says nothing of the file run.
        return [f"{exe} here is not the file it runs"]
    problems = trust.problems(exe, "executable")
    return [p.removeprefix("executable ") for p in problems[:1]]


def holds_token(proc: ProcFS, pid: int, token: Token) -> bool:
    """Whether ``pid`` has the run's lock file open (the same file, not only its path)."""
    path, ident = token
    try:
        paths = proc.open_paths(pid)
    except ProcAccessError:
        return False
    for fd, target in paths:
        if target != path:
            continue
        st = proc.link_stat(pid, "fd", fd)
        if st is not None and (st.st_dev, st.st_ino) == ident:
            return True
    return False

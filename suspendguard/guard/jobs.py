"""The jobs behind the holders: who gets the drain signal so that each process gets it once.

A training job is more than its holders. Its launcher (torchrun's elastic
agent, mpirun, DeepSpeed's launcher, msrun) holds nothing, yet decides what
happens when a rank leaves: torchrun forwards SIGINT to every rank and
waits, but SIGTERMs the others when one rank fails; mpirun turns SIGINT
into SIGTERM for its ranks; DeepSpeed's launcher and msrun kill the rest
when one rank exits. And a rank's DataLoader workers, forked after the
device was opened, hold the rank's nodes through inherited fds, yet leave
with their rank: a SIGINT of their own breaks the rank's loop.

So the holders are grouped into jobs before anyone is signalled:

- a holder whose parent is a holder too, of the same uid and in the
  parent's process group, and that holds a node through the very open file
  its parent holds (an fd inherited across fork, told by kcmp(2)), or that
  holds a node its parent holds by a mapping alone (the inherited fd
  closed, the mapping kept), is a *worker*: it is waited for, never
  signalled. Where kcmp cannot tell, holding by fd a node its parent holds
  is enough. A child that opened the node itself (a job started beside
  another from one shell) is a job of its own;
- the others are the job's *roots*; each root's nearest ancestor of the
  same uid that is a known launcher is the job's launcher;
- a launcher that forwards the signal and waits for its ranks (``forward``:
  torchrun, ``accelerate launch``) gets the one signal itself, and its
  roots get it from the launcher; a root the agent's signal does not reach
  (below a rank, outside the rank's process group) gets it from the guard;
- one that kills the other ranks when one leaves and needs nothing from
  them meanwhile (``hold``: DeepSpeed's launcher, msrun, and
  ``torch.distributed.launch`` of torch before 1.9, told by its ranks'
  environment, which lacks the elastic agent's TORCHELASTIC_RUN_ID) never
  gets it: its roots get it from the guard while the launcher is stopped
  (SIGSTOP), so that it cannot kill or restart a rank that is still
  saving; it is continued once its ranks left (guard/held.py writes that
  down first);
- mpirun (``ranks``) never gets it either, not even where it holds a node
  itself, and is not stopped: its ranks get it from the guard. Stopping it
  deadlocks the ranks, whose MPI_Finalize waits for mpirun's daemon
  (docs/ai-frameworks.md). When a rank crashes on its SIGINT, mpirun still
  SIGTERMs the others: that is the job's own.

Only an ancestor running as the same uid as the holder counts: a process
may name itself ``torchrun``, but it cannot make root signal another
user's process by doing so.
"""

from __future__ import annotations

import signal
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from suspendguard.config import LauncherRule
from suspendguard.guard.describe import stopped_state
from suspendguard.guard.launchers import AGENTS, BUILTIN, LauncherKind, builtin_kind
from suspendguard.guard.policy import rule_matches
from suspendguard.model import Disposition, Holder, HolderId, holder_id
from suspendguard.system import kcmp
from suspendguard.system.procfs import ProcAccessError, ProcFS

# How far up from a holder the launcher is looked for (a shell, a wrapper,
# ``python -m``, conda's activation wrapper, the launcher).
MAX_DEPTH = 6


@dataclass(frozen=True, slots=True)
class Launcher:
    """A launcher above one or more roots: the process taken, and how it is stopped."""

    pid: int
    start_time: int
    uid: int
    comm: str
    command: str
    kind: LauncherKind
    sigint: Disposition  # how it takes the drain signal, as read now
    stopped: str = ""  # "T" or "t" where it was stopped when read (describe.stopped_state)

    @property
    def id(self) -> HolderId:
        return (self.pid, self.start_time)

    @property
    def label(self) -> str:
        return f"{self.kind.name} (pid {self.pid})"


@dataclass(frozen=True, slots=True)
class Job:
    """One job: its roots (signalled), its workers (waited for), its launcher."""

    roots: tuple[Holder, ...]
    workers: tuple[Holder, ...] = ()
    launcher: Launcher | None = None
    # Roots a forwarding launcher's signal does not reach (started below a rank, outside its
    # process group): the guard signals them too.
    beyond: frozenset[HolderId] = frozenset()
    # Workers told without kcmp's word (it could not compare their fds): a child of a holder,
    # its uid and process group, holding a node its parent holds.
    unsure: frozenset[HolderId] = frozenset()

    @property
    def reached(self) -> list[HolderId]:
        """The roots the launcher's forwarded signal reaches."""
        return [holder_id(r) for r in self.roots if holder_id(r) not in self.beyond]

    @property
    def forwarded(self) -> bool:
        """The launcher gets the signal and passes it on to the roots."""
        return self.launcher is not None and self.launcher.kind.stop == "forward"

    @property
    def held(self) -> bool:
        """The launcher is stopped while its roots take the signal from the guard."""
        return self.launcher is not None and self.launcher.kind.stop == "hold"


@dataclass(frozen=True, slots=True)
class Plan:
    """The jobs behind a batch of holders, and who of them gets the signal."""

    jobs: tuple[Job, ...]

    def role(self, holder: Holder) -> tuple[str, Job] | None:
        """("worker", job) or ("forwarded", job) for a holder the guard does not signal itself;
        ("held", job) for a root whose launcher is stopped meanwhile; ("ranks", job) for a
        root whose launcher is left alone; ("launcher", job) for that launcher, or the one
        stopped, where it holds a node itself: not signalled beside its ranks (mpirun would
        turn the signal into SIGTERM for them, never signalled; a stopped one would act on it
        when continued, a rank still saving or not: signalled once they left); None
        otherwise."""
        key = holder_id(holder)
        if (launched := self._launched_by(key)) is not None:
            return "launcher", launched
        for job in self.jobs:
            if any(holder_id(w) == key for w in job.workers):
                return "worker", job
            if any(holder_id(r) == key for r in job.roots):
                if job.forwarded:
                    return ("beyond" if key in job.beyond else "forwarded"), job
                if job.held:
                    return "held", job
                if job.launcher is not None:
                    return "ranks", job
                return None
        return None

    def note(self, holder: Holder) -> str:
        """What the plan does with ``holder``, in the words of check and the history."""
        found = self.role(holder)
        if found is None:
            return ""
        what, job = found
        if what == "worker":
            parent = next((r for r in job.roots if r.pid == holder.ppid), None)
            name = f"pid {holder.ppid} {parent.comm}" if parent else f"pid {holder.ppid}"
            how = ("its process group and uid, a node its parent holds: kcmp could not "
                   "compare their fds" if holder_id(holder) in job.unsure
                   else "forked, its process group, the nodes inherited")
            return f"a worker of {name} ({how}): leaves with it, never signalled beside it"
        assert job.launcher is not None
        if what == "launcher":
            return self.note_of(holder_id(holder))
        if what == "forwarded" and job.launcher.sigint in ("ignored", "blocked"):
            return (f"a rank of {job.launcher.label}, which does not take the signal (it is "
                    f"{job.launcher.sigint}): the rank gets it from the guard, the launcher none")
        if what == "forwarded":
            return (f"a rank of {job.launcher.label}: the signal goes to the launcher, "
                    "which forwards it once to each rank and waits")
        if what == "beyond":
            return (f"below a rank of {job.launcher.label}, out of reach of the signal it "
                    "forwards to its ranks: gets the signal from the guard, the launcher its own "
                    "(a rank's script that passes SIGINT on itself would give it a second: "
                    "end the script with exec)")
        if what == "ranks":
            return (f"a rank of {job.launcher.label}, which {job.launcher.kind.restarts}: the "
                    "rank gets the signal, never the launcher")
        return (f"a rank of {job.launcher.label}, which {job.launcher.kind.restarts}: the rank "
                "gets the signal, the launcher is stopped (SIGSTOP) until its ranks left")

    def note_of(self, key: HolderId) -> str:
        """The note of a launcher left alone that holds a node itself, by its id."""
        job = self._launched_by(key)
        if job is None or job.launcher is None:
            return ""
        if job.held:
            return (f"the launcher of ranks the guard signals itself, which "
                    f"{job.launcher.kind.restarts}: stopped (SIGSTOP) until they left, then "
                    "signalled and continued")
        return (f"the launcher of ranks the guard signals itself, which "
                f"{job.launcher.kind.restarts}: never signalled, it leaves once they left")

    def launchers(self, stop: str) -> list[Launcher]:
        seen: dict[HolderId, Launcher] = {}
        for job in self.jobs:
            if job.launcher is not None and job.launcher.kind.stop == stop:
                seen.setdefault(job.launcher.id, job.launcher)
        return list(seen.values())

    def signalled(self) -> list[Holder]:
        """The holders the guard itself signals."""
        return [r for job in self.jobs for r in job.roots
                if (not job.forwarded or holder_id(r) in job.beyond)
                and self._launched_by(holder_id(r)) is None]

    def _launched_by(self, key: HolderId) -> Job | None:
        """The job whose launcher, left alone or stopped while the guard signals its ranks,
        is ``key``."""
        return next((job for job in self.jobs if job.launcher is not None
                     and job.launcher.id == key and not job.forwarded), None)


def plan(holders: Sequence[Holder], proc: ProcFS, rules: Sequence[LauncherRule] = (),
         never: Iterable[int] = (), signum: int = signal.SIGINT,
         asked: Collection[HolderId] = ()) -> Plan:
    """Group ``holders`` (all to be stopped) into jobs.

    ``asked``: holders stopped their own way, never by a signal (a Jupyter
    kernel's shutdown_request): each is a job of its own, under no launcher,
    and only gathers its workers.
    """
    by_pid = {h.pid: h for h in holders}
    groups = {h.pid: _pgrp(proc, h.pid) for h in holders}
    workers: dict[int, list[Holder]] = {}
    unsure: set[HolderId] = set()
    roots: list[Holder] = []
    for h in holders:
        parent = by_pid.get(h.ppid)
        how = ""
        if (parent is not None and parent.uid == h.uid and groups[h.pid] is not None
                and groups[h.pid] == groups[parent.pid]):
            how = _inherited(proc, h, parent)
        if how:
            # A worker of a worker (a DataLoader inside a worker) leaves with its root too.
            workers.setdefault(_root_of(h, by_pid, groups), []).append(h)
            if how == "unsure":
                unsure.add(holder_id(h))
        else:
            roots.append(h)
    never = set(never) | {0, 1}
    jobs: dict[object, list[Holder]] = {}
    found: dict[object, Launcher | None] = {}
    for root in roots:
        launcher = (None if holder_id(root) in asked
                    else _launcher_of(root, proc, rules, never, signum))
        key: object = launcher.id if launcher is not None else ("alone", root.pid)
        jobs.setdefault(key, []).append(root)
        found[key] = launcher
    planned = []
    for key, rs in jobs.items():
        agent = _agent(proc, found[key], rs)
        mine = tuple(w for r in rs for w in workers.get(r.pid, ()))
        planned.append(Job(
            tuple(rs), mine, agent,
            frozenset(holder_id(r) for r in rs if not _reached(proc, agent, r, groups[r.pid])),
            frozenset(holder_id(w) for w in mine) & unsure))
    return Plan(tuple(planned))


def _reached(proc: ProcFS, launcher: Launcher | None, root: Holder, group: int | None) -> bool:
    """Whether a built-in agent's forwarded signal reaches ``root``: it signals each rank it
    started (torch 1.13), or each rank's process group (newer torch: a session per rank)."""
    if (launcher is None or launcher.kind not in AGENTS
            or root.ppid == launcher.pid or group is None):
        return True
    try:
        leader = proc.stat(group)
    except ProcAccessError:
        return True
    return leader is not None and leader.ppid == launcher.pid


def _agent(proc: ProcFS, launcher: Launcher | None,
           roots: Sequence[Holder]) -> Launcher | None:
    """The launcher's kind, its roots seen.

    ``accelerate launch`` of one process starts one child; two or more of its own children
    holding a node are torchrun's agent at work in its process (the processes set by
    ``accelerate config``'s file, not on the command line): it forwards.
    ``python -m torch.distributed.launch`` is torchrun's agent from torch 1.9 on, which sets
    TORCHELASTIC_RUN_ID in every rank's environment; ranks whose environment was read and
    lacks it are those of the launcher before 1.9, which does not forward: it is held.
    Where the environment cannot be read, it stays the agent (Debian 12's torch 1.13).
    """
    if launcher is None:
        return None
    if (launcher.kind == BUILTIN["accelerate-single"]
            and sum(r.ppid == launcher.pid for r in roots) > 1):
        return replace(launcher, kind=BUILTIN["accelerate"])
    if launcher.kind == BUILTIN["torch-launch"] and _without_agent(proc, roots):
        return replace(launcher, kind=BUILTIN["torch-launch-legacy"])
    return launcher


def _without_agent(proc: ProcFS, roots: Sequence[Holder]) -> bool:
    """Whether every root's environment could be read, and none names an elastic run."""
    for root in roots:
        try:
            environ = proc.read(root.pid, "environ")
        except ProcAccessError:
            return False
        if not environ:  # gone, or nothing to read: cannot tell
            return False
        if any(var.startswith(b"TORCHELASTIC_RUN_ID=") for var in environ.split(b"\0")):
            return False
    return bool(roots)


def _node_fds(proc: ProcFS, holder: Holder) -> list[int]:
    """The fds by which ``holder`` holds its nodes (by the paths it sees them at)."""
    paths = {n.seen_as for n in holder.nodes if n.via == "fd"}
    try:
        return [int(fd) for fd, path in proc.open_paths(holder.pid) if path in paths]
    except (ProcAccessError, ValueError):
        return []


def _inherited(proc: ProcFS, child: Holder, parent: Holder) -> str:
    """How ``child``, of its parent's uid and process group, holds what ``parent`` holds.

    "fd": through an open file it shares with ``parent`` (inherited across fork, told by
    kcmp); "map": by a mapping alone, no fd of its own on that node (a DataLoader worker that
    closed the fd it inherited, its mappings kept: a fork is how it got them); "unsure": kcmp
    could not tell, and it holds by fd a node its parent holds; "": it opened its own.
    """
    held = {n.node.key for n in parent.nodes}
    by_fd = {n.node.key for n in child.nodes if n.via == "fd"}
    answers = {kcmp.same_file(child.pid, a, parent.pid, b)
               for a in _node_fds(proc, child) for b in _node_fds(proc, parent)}
    if True in answers:
        return "fd"
    if held & ({n.node.key for n in child.nodes if n.via == "map"} - by_fd):
        return "map"
    if None in answers and held & by_fd:
        return "unsure"
    return ""


def _root_of(h: Holder, by_pid: dict[int, Holder], groups: dict[int, int | None]) -> int:
    seen = {h.pid}
    while True:
        parent = by_pid.get(h.ppid)
        if (parent is None or parent.pid in seen or groups[parent.pid] != groups[h.pid]
                or parent.uid != h.uid):
            return h.pid
        seen.add(parent.pid)
        h = parent


def _pgrp(proc: ProcFS, pid: int) -> int | None:
    try:
        st = proc.stat(pid)
    except ProcAccessError:
        return None
    return None if st is None else st.pgrp


def _launcher_of(root: Holder, proc: ProcFS, rules: Sequence[LauncherRule],
                 never: set[int], signum: int) -> Launcher | None:
    pid, below = root.ppid, root.start_time
    for _ in range(MAX_DEPTH):
        if pid in never:
            return None
        try:
            st = proc.stat(pid)
            status = proc.status(pid)
        except ProcAccessError:
            return None
        if st is None or status is None or status.uid != root.uid:
            return None  # gone, or another user's: nothing above counts
        if st.start_time > below:
            return None  # started after its child: the parent left and its pid was reused
        cmdline = proc.cmdline(pid)
        exe = proc.link(pid, "exe")
        kind = (_rule_kind(rules, pid, st.comm, exe, cmdline, status.uid) or
                builtin_kind(cmdline, exe))
        if kind is not None:
            return Launcher(pid, st.start_time, status.uid, st.comm,
                            " ".join(" ".join(a.split()) for a in cmdline) or f"[{st.comm}]",
                            kind, status.masks.disposition(signum), stopped_state(proc, pid, st))
        pid, below = st.ppid, st.start_time
    return None


def _rule_kind(rules: Sequence[LauncherRule], pid: int, comm: str, exe: str,
               cmdline: Sequence[str], uid: int) -> LauncherKind | None:
    for rule in rules:
        probe = Holder(pid, 0, 0, uid, "", comm, exe, tuple(cmdline), None, None, (), (),
                       "default")
        if rule_matches(rule.match, probe):
            return LauncherKind(rule.name or comm, rule.stop, rule.restarts or
                                "acts on its ranks when one leaves")
    return None



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
  its parent holds (an fd inherited across fork, told by kcmp(2)), is a
  *worker*: it is waited for, never signalled. A child that opened the node
  itself (a job started beside another from one shell) is a job of its own;
- the others are the job's *roots*; each root's nearest ancestor of the
  same uid that is a known launcher is the job's launcher;
- a launcher that forwards the signal and waits for its ranks (``forward``:
  torchrun, ``accelerate launch``) gets the one signal itself, and its
  roots get it from the launcher; a root the agent's signal does not reach
  (below a rank, outside the rank's process group) gets it from the guard;
- one that kills the other ranks when one leaves and needs nothing from
  them meanwhile (``hold``: DeepSpeed's launcher, msrun) never gets it: its
  roots get it from the guard while the launcher is stopped (SIGSTOP), so
  that it cannot kill or restart a rank that is still saving; it is
  continued once its ranks left (guard/held.py writes that down first);
- mpirun (``ranks``) never gets it either, and is not stopped: its ranks
  get it from the guard. Stopping it deadlocks the ranks, whose
  MPI_Finalize waits for mpirun's daemon (docs/ai-frameworks.md). When a
  rank crashes on its SIGINT, mpirun still SIGTERMs the others: that is the
  job's own.

Only an ancestor running as the same uid as the holder counts: a process
may name itself ``torchrun``, but it cannot make root signal another
user's process by doing so.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from suspendguard.config import LauncherRule
from suspendguard.guard.policy import rule_matches
from suspendguard.guard.python_argv import python_runs
from suspendguard.model import Disposition, Holder, HolderId, holder_id
from suspendguard.system import kcmp
from suspendguard.system.procfs import ProcAccessError, ProcFS

# How far up from a holder the launcher is looked for (a shell, a wrapper,
# ``python -m``, conda's activation wrapper, the launcher).
MAX_DEPTH = 6


@dataclass(frozen=True, slots=True)
class LauncherKind:
    name: str  # "torchrun", "mpirun", ... or the rule's name
    stop: str  # "forward", "hold" or "ranks"
    restarts: str = ""  # what it does when a rank leaves first, in the reason's words


# Each built-in kind: its name, how it is told (argv), how it is stopped.
_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "deepspeed.launcher.launch": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
    "mindspore.parallel.cluster.run": "msrun",
}
_SCRIPTS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "msrun": "msrun"}
_MPI = {"mpirun", "mpiexec", "orterun", "prterun", "mpirun.openmpi", "mpiexec.openmpi",
        "mpiexec.hydra", "mpirun.mpich", "mpiexec.mpich"}
BUILTIN: dict[str, LauncherKind] = {
    "torchrun": LauncherKind("torchrun", "forward",
                             "SIGTERMs the other ranks when one fails, SIGKILLs ranks 30 s "
                             "after it forwarded a signal"),
    "accelerate": LauncherKind("accelerate", "forward",
                               "runs torchrun's agent in its own process"),
    # ``accelerate launch`` of one process is a bare Popen().wait(): nothing
    # is forwarded, so its one rank gets the signal itself.
    "accelerate-single": LauncherKind("accelerate", "ranks",
                                      "waits for its one process and forwards nothing"),
    "deepspeed": LauncherKind("deepspeed", "hold",
                              "SIGTERMs every rank on SIGINT, and when one rank exits"),
    "msrun": LauncherKind("msrun", "hold", "SIGKILLs the other ranks when one exits non-zero"),
    "mpirun": LauncherKind("mpirun", "ranks", "turns SIGINT into SIGTERM for its ranks"),
}


def builtin_kind(cmdline: Sequence[str], exe: str) -> LauncherKind | None:
    """The built-in launcher a command line runs, if any."""
    if not cmdline:
        return None
    names = [os.path.basename(exe), os.path.basename(cmdline[0])]
    if names[0].startswith("python") or names[1].startswith("python"):
        how, target, after = python_runs(cmdline[1:])
        if how == "-m":
            if target in _MODULES:
                return BUILTIN[_MODULES[target]]
            if target == "accelerate.commands.launch":
                return _accelerate(after)
            return None
        if how == "script":
            names.append(os.path.basename(target))
            words = [a for a in after if not a.startswith("-")]
            if os.path.basename(target) == "accelerate" and words[:1] == ["launch"]:
                return _accelerate(after[after.index("launch") + 1:])
    for name in names:
        if name in _SCRIPTS:
            return BUILTIN[_SCRIPTS[name]]
        if name in _MPI:
            return BUILTIN["mpirun"]
    if names[1] == "accelerate" and len(cmdline) > 1 and cmdline[1] == "launch":
        return _accelerate(cmdline[2:])
    return None


_ACCELERATE_MULTI = ("--multi_gpu", "--multi-gpu", "--use_deepspeed", "--use-deepspeed",
                     "--use_fsdp", "--use-fsdp", "--use_megatron_lm", "--num_machines",
                     "--num-machines")


# accelerate launch's options that take no value; any other takes the next word unless
# given as --key=value. Its first other word is the script, whose own options are its own.
_ACCELERATE_FLAGS = frozenset((
    "--cpu", "--tpu", "--ipex", "--use_xpu", "--use-xpu", "-m", "--module", "--no_python",
    "--no-python", "-q", "--quiet", "--debug", "-h", "--help", "--same_network",
    "--same-network", "--tpu_use_cluster", "--tpu_use_sudo", "--downcast_bf16",
    "--enable_cpu_affinity",
))


def _accelerate(args: Sequence[str]) -> LauncherKind:
    """torchrun's agent in-process for several processes; a bare wait for one. ``args``:
    those after ``launch``, the script's own included."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        key, eq, value = args[i].partition("=")
        if key in _ACCELERATE_MULTI:
            return BUILTIN["accelerate"]
        if not eq and key not in _ACCELERATE_FLAGS:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        if key in ("--num_processes", "--num-processes") and value.isdigit() and int(value) > 1:
            return BUILTIN["accelerate"]
        i += 1
    return BUILTIN["accelerate-single"]


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
        root whose launcher is left alone; None otherwise."""
        key = holder_id(holder)
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
            return (f"a worker of {name} (forked, its process group, the nodes inherited): "
                    "leaves with it, never signalled beside it")
        assert job.launcher is not None
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

    def launchers(self, stop: str) -> list[Launcher]:
        seen: dict[HolderId, Launcher] = {}
        for job in self.jobs:
            if job.launcher is not None and job.launcher.kind.stop == stop:
                seen.setdefault(job.launcher.id, job.launcher)
        return list(seen.values())

    def signalled(self) -> list[Holder]:
        """The holders the guard itself signals."""
        return [r for job in self.jobs for r in job.roots
                if not job.forwarded or holder_id(r) in job.beyond]


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
    roots: list[Holder] = []
    for h in holders:
        parent = by_pid.get(h.ppid)
        if (parent is not None and parent.uid == h.uid and groups[h.pid] is not None
                and groups[h.pid] == groups[parent.pid] and _inherited(proc, h, parent)):
            # A worker of a worker (a DataLoader inside a worker) leaves with its root too.
            workers.setdefault(_root_of(h, by_pid, groups), []).append(h)
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
    return Plan(tuple(
        Job(tuple(rs), tuple(w for r in rs for w in workers.get(r.pid, ())), agent,
            frozenset(holder_id(r) for r in rs if not _reached(proc, agent, r, groups[r.pid])))
        for key, rs in jobs.items() for agent in [_agent(found[key], rs)]))


def _reached(proc: ProcFS, launcher: Launcher | None, root: Holder, group: int | None) -> bool:
    """Whether a built-in agent's forwarded signal reaches ``root``: it signals each rank it
    started (torch 1.13), or each rank's process group (newer torch: a session per rank)."""
    if (launcher is None or launcher.kind not in (BUILTIN["torchrun"], BUILTIN["accelerate"])
            or root.ppid == launcher.pid or group is None):
        return True
    try:
        leader = proc.stat(group)
    except ProcAccessError:
        return True
    return leader is not None and leader.ppid == launcher.pid


def _agent(launcher: Launcher | None, roots: Sequence[Holder]) -> Launcher | None:
    """``accelerate launch`` of one process starts one child; two or more of its own children
    holding a node are torchrun's agent at work in its process (the processes set by
    ``accelerate config``'s file, not on the command line): it forwards."""
    if (launcher is not None and launcher.kind == BUILTIN["accelerate-single"]
            and sum(r.ppid == launcher.pid for r in roots) > 1):
        return replace(launcher, kind=BUILTIN["accelerate"])
    return launcher


def _node_fds(proc: ProcFS, holder: Holder) -> list[int]:
    """The fds by which ``holder`` holds its nodes (by the paths it sees them at)."""
    paths = {n.seen_as for n in holder.nodes if n.via == "fd"}
    try:
        return [int(fd) for fd, path in proc.open_paths(holder.pid) if path in paths]
    except (ProcAccessError, ValueError):
        return []


def _inherited(proc: ProcFS, child: Holder, parent: Holder) -> bool:
    """Whether ``child`` holds a node through an open file it shares with ``parent``."""
    mine = _node_fds(proc, child)
    theirs = _node_fds(proc, parent)
    return any(kcmp.same_file(child.pid, a, parent.pid, b) for a in mine for b in theirs)


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
                            kind, status.masks.disposition(signum))
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



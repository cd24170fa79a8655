"""Plain data shared by the pipeline: nodes, holders, their owners, decisions, verdicts."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from suspendguard.verdict import Reason, ReasonCode

# compute: holding one means a job to drain; management: monitoring and management
# tools hold these too; graphics: NVIDIA's /dev/nvidiaN, which display servers and
# graphics clients hold as well as CUDA jobs (CUDA work is told by /dev/nvidia-uvm).
Role = Literal["compute", "management", "graphics"]
# What the policy's rules say of a holder (the "action" of the JSON and the history).
# keep: a graphics client, which the driver's own suspend path takes care of.
Action = Literal["drain", "protect", "ignore", "never", "keep"]
# What the guard does with a holder before any signal, rules and signal masks weighed.
DecisionKind = Literal[
    "drain",  # signal it and wait for its exit
    "escalate",  # it ignores the drain signal: signal it, then escalate
    "leave",  # not the guard's business (ignored by a rule, kept, PID 1, the guard itself)
    "protect",  # a protect rule: veto while it runs, never signalled
    "veto-frozen",  # frozen cgroup: it cannot exit until thawed, so veto
    "veto-stopped",  # stopped: a signal stays pending until it continues, so veto
    "veto-sigint-ignored",  # it ignores the drain signal and nothing may follow it: veto
    "veto-sigint-blocked",  # it blocks the drain signal in every thread, nothing waits for it: veto
    "veto-supervised",  # its supervisor would start it again whatever the guard does (a pod)
    "veto-unconfirmed",  # drain from a shell: not on the list the operator confirmed
    "veto-jupyter",  # a Jupyter kernel: SIGINT never ends it, only interrupts its cell
    "veto-never",  # PID 1, or an ancestor of the guard's run, holds a compute node
    "jupyter-shutdown",  # a Jupyter kernel asked to shut down on its control channel ([drain] jupyter)
]
# signalled: the history's row written ahead of the signal, the guard ended before it
# recorded the outcome (an interrupted attempt's holders); Outcome.signalled says whether
# the signal had reached the holder by then.
OutcomeKind = Literal["exited", "timeout", "not-signalled", "gone-before-signal", "would-signal",
                      "signalled"]
# How a process takes SIGINT. blocked: in every thread, and nothing waits for it
# (no sigwait, no signalfd): kill -2 can never reach it; waited: blocked, but a
# thread waits for it in sigwait or a signalfd takes it; unknown: the guard
# could not tell (a process the device reported, threads it may not inspect).
Disposition = Literal["default", "caught", "ignored", "blocked", "waited", "unknown"]

# Handlers for these may free device resources behind the driver's back.
UNSTOPPABLE = (signal.SIGKILL, signal.SIGSTOP)
FATAL_SIGNALS = (signal.SIGILL, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGSEGV)

# Identity of a node: ("char", rdev) for character devices, ("file",
# st_dev, st_ino) for anything else (plain-file stand-ins in tests).
NodeKey = tuple[Any, ...]

@dataclass(frozen=True, slots=True)
class Unavailable:
    """A part that could not be had here (a bus, a service, a file, a tool), and why.

    The one "not available" value: whatever can be missing is this, never an
    exception leaking into the renderers and never a guessed default.
    """

    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"available": False, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class NoAnswer(Unavailable):
    """A request that got no answer in time, or whose wait was cut short: the other side
    may have acted on it all the same (a daemon-reload systemd goes on with)."""


# The sleep actions systemd knows, each with its systemd-ACTION.service.
SLEEP_ACTIONS = ("suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate")


@dataclass(frozen=True, slots=True)
class Node:
    """A device node that exists now."""

    path: str
    family: str  # "ascend", "nvidia" or "extra"
    role: Role
    key: NodeKey
    file_id: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of the node file itself

    @property
    def identity(self) -> str:
        if self.key[0] == "char":
            rdev = int(self.key[1])
            return f"char {os.major(rdev)}:{os.minor(rdev)}"
        return f"file {self.key[1]}:{self.key[2]}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "family": self.family, "role": self.role,
                "identity": self.identity}


@dataclass(frozen=True, slots=True)
class Inventory:
    nodes: tuple[Node, ...]
    notes: tuple[str, ...] = ()

    def by_key(self) -> dict[NodeKey, Node]:
        return {n.key: n for n in self.nodes}

    def families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.family for n in self.nodes))


@dataclass(frozen=True, slots=True)
class SignalMasks:
    """SigBlk, SigIgn and SigCgt of /proc/PID/status: bit N-1 stands for signal N."""

    blocked: int = 0
    ignored: int = 0
    caught: int = 0

    def disposition(self, signum: int) -> Disposition:
        """How the process takes ``signum``: ignored, blocked, caught or default."""
        bit = 1 << (signum - 1)
        if self.ignored & bit:
            return "ignored"
        if self.blocked & bit:
            return "blocked"
        if self.caught & bit:
            return "caught"
        return "default"

    def fatal_handlers(self) -> tuple[str, ...]:
        """The fatal signals the process catches, by name."""
        return tuple(s.name for s in FATAL_SIGNALS if self.caught & (1 << (s - 1)))


@dataclass(frozen=True, slots=True)
class HeldNode:
    node: Node
    seen_as: str  # the path as the holder sees it (may differ: containers)
    via: Literal["fd", "map", "io_uring"]  # io_uring: a file registered with a ring


@dataclass(frozen=True, slots=True)
class Holder:
    """A process holding an accelerator node (or reported by the device)."""

    pid: int
    start_time: int  # field 22 of /proc/PID/stat, clock ticks since boot
    ppid: int
    uid: int
    user: str
    comm: str
    exe: str
    cmdline: tuple[str, ...]
    unit: str | None
    container: str | None
    nspid: tuple[int, ...]
    nodes: tuple[HeldNode, ...]
    sigint: Disposition
    fatal_handlers: tuple[str, ...] = ()
    frozen: bool = False  # its cgroup is frozen (cgroup v2, or the v1 freezer)
    source: str = "proc"  # "proc", or the backend that reported it
    sig_masks: SignalMasks = SignalMasks()
    thaw: str = ""  # frozen: the file that thaws it (cgroup.freeze or freezer.state)
    stopped: str = ""  # "T" (SIGSTOP and friends) or "t" (a debugger's stop); "" when not
    cgroup: str | None = None  # the cgroup path, which names the holder's supervisor
    log_dirs: tuple[str, ...] = ()  # its own CANN log folders, from its environment

    def disposition(self, signum: int) -> Disposition:
        """How this process takes ``signum`` (as read when it was scanned)."""
        if self.source != "proc" and self.sig_masks == SignalMasks():
            return "unknown"
        taken = self.sig_masks.disposition(signum)
        if taken == "default" and self.namespace_init and signum not in UNSTOPPABLE:
            return "ignored"  # the kernel drops it on the way in
        return taken

    @property
    def namespace_init(self) -> bool:
        """PID 1 of a PID namespace below the guard's (a container's init, run without one):
        a signal it has no handler for, sent from an ancestor namespace, is dropped by the
        kernel, SIGKILL and SIGSTOP aside (pid_namespaces(7))."""
        return len(self.nspid) > 1 and self.nspid[-1] == 1

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(h.node.role for h in self.nodes)

    @property
    def command(self) -> str:
        """The command line on one printable line."""
        if not self.cmdline:
            return f"[{self.comm}]"
        return " ".join(" ".join(part.split()) for part in self.cmdline)

    def node_paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h.node.path for h in self.nodes))


HolderId = tuple[int, int]  # (pid, start time): a process, not a reusable number


def holder_id(holder: Holder) -> HolderId:
    return (holder.pid, holder.start_time)


@dataclass(frozen=True, slots=True)
class ScanResult:
    holders: tuple[Holder, ...]
    unreadable: int  # processes whose fds/maps could not be read
    unreadable_pids: tuple[int, ...] = ()
    scanned: int = 0
    # Processes with a device mapping the kernel would not let the guard
    # follow (/proc/PID/map_files without CAP_SYS_ADMIN): never silent.
    maps_refused: tuple[int, ...] = ()
    listed: frozenset[int] = frozenset()  # every pid the scan looked at
    # Processes whose scan did not answer by the run's deadline (among the unreadable):
    # a read of /proc that blocks behind a process stuck in the kernel.
    late: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """What the guard does with one holder, decided before any signal is sent."""

    holder: Holder
    action: Action
    rule: str  # which rule decided, in words
    signal: str  # the drain signal ([drain] signal) it is, or would be, sent
    wait_s: float  # its wait after that signal: its [[policy.drain]] rule's, or [drain] timeout_s
    notes: tuple[str, ...] = ()
    kind: DecisionKind = "drain"
    # The veto reason (or, for a decision that does not veto, the warning) this decision adds.
    reason: str = ""

    @property
    def signals(self) -> bool:
        return self.kind in ("drain", "escalate", "jupyter-shutdown")

    @property
    def vetoes(self) -> bool:
        return self.kind in DECISION_CODES

    def veto(self, owner: str | None = None) -> Reason:
        """The veto this decision makes, as a typed reason (``vetoes`` only)."""
        return reason_about(DECISION_CODES[self.kind], self.reason, self.holder, owner)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one holder: exited, timeout, not-signalled, ..."""

    kind: OutcomeKind
    seconds: float | None = None
    why: str = ""
    # The drain signal (or an escalation's) reached it: from the guard, or forwarded by its
    # launcher. A later attempt sends such a holder, still running, no second one.
    signalled: bool = False

    def cell(self) -> str:
        """The outcome in a table's cell: its kind, with the seconds of an exit; the why, given
        whole, goes under the table."""
        if self.kind == "exited" and self.seconds is not None:
            return f"exited after {self.seconds:.2f} s"
        return self.kind

    def describe(self) -> str:
        """The outcome in words, its why included ("exited after 37.20 s, after escalation to
        SIGKILL")."""
        if self.kind == "exited" and self.seconds is not None:
            return self.cell() + (f", {self.why}" if self.why else "")
        return f"{self.kind}: {self.why}" if self.why else self.kind

    def to_json(self) -> dict[str, Any]:
        """The one JSON form of an outcome, in every command's output."""
        return {"kind": self.kind, "seconds": self.seconds, "why": self.why}


OwnerKind = Literal["systemd-service", "user-service", "docker", "podman", "kubernetes", "plain"]
# The owners stopped and started through a container engine's API.
CONTAINER_KINDS: tuple[OwnerKind, ...] = ("docker", "podman")
# The owners a manager of systemd answers for (the system one, a user's).
SYSTEMD_KINDS: tuple[OwnerKind, ...] = ("systemd-service", "user-service")


@dataclass(frozen=True, slots=True)
class Owner:
    """The supervisor of one holder, and what it would do when the holder exits.

    Read from the holder's cgroup (supervise/owner.py), filled in from the
    supervisor's own API (supervise/managers.py); the history keeps its key.

    ``restart`` is the supervisor's own word (``always``, ``on-failure``,
    ``no``, Docker's ``unless-stopped``...), "" where it could not be read
    (``note`` says why).
    """

    kind: OwnerKind
    name: str = ""  # unit name, container id or pod uid; "" for a plain process
    uid: int | None = None  # the user manager's uid, for a user service
    restart: str = ""
    restart_delay_s: float = 0.0
    kill_mode: str = ""
    exec_stop: bool = False
    activity: str = ""  # the unit's ActiveState, the container's State.Status
    triggered_by: tuple[str, ...] = ()  # timers, paths, sockets that start the unit
    engine: str = ""  # the engine's API socket, for containers
    note: str = ""
    main_pid: int = 0  # the unit's main process (a launcher, when it holds nothing)
    timeout_stop_s: float = 0.0  # the unit's TimeoutStopSec=, 0 when infinite or unknown
    transient: bool = False  # a transient unit (systemd-run): gone once it stopped

    @property
    def key(self) -> str:
        """One string naming the owner, as the history and [restore] skip see it."""
        if self.kind == "plain":
            return "plain"
        if self.kind == "user-service":
            return f"user-service:{self.uid}:{self.name}"
        return f"{self.kind}:{self.name}"

    @property
    def restarts(self) -> bool:
        """Whether the supervisor starts the job again when it exits after a signal."""
        if self.kind in ("systemd-service", "user-service", "docker", "podman"):
            # "" when the manager or engine could not be asked: its Restart= may well.
            return self.restart != "no"
        return self.kind == "kubernetes"

    @property
    def short_name(self) -> str:
        """The name as shown to a person: a container's id cut as its engine shows it."""
        return self.name[:12] if self.kind in CONTAINER_KINDS else self.name

    def describe(self) -> str:
        if self.kind == "plain":
            return "plain process"
        what = {"systemd-service": "systemd service", "user-service": f"user {self.uid}'s service",
                "docker": "Docker container", "podman": "Podman container",
                "kubernetes": "Kubernetes pod"}.get(self.kind, self.kind)  # a newer one's: its word
        tail = f"restart {self.restart}" if self.restart else self.note
        return f"{what} {self.short_name}" + (f" ({tail})" if tail else "")

    def to_json(self) -> dict[str, Any]:
        # "state" is the pinned JSON key of ``activity``.
        return {"kind": self.kind, "name": self.name or None, "uid": self.uid,
                "restart": self.restart or None, "restart_delay_s": self.restart_delay_s,
                "kill_mode": self.kill_mode or None, "exec_stop": self.exec_stop,
                "state": self.activity or None, "triggered_by": list(self.triggered_by),
                "engine": self.engine or None, "note": self.note or None,
                "main_pid": self.main_pid or None, "timeout_stop_s": self.timeout_stop_s or None,
                "transient": self.transient}

    def with_note(self, note: str) -> Owner:
        return replace(self, note=note)

    @classmethod
    def from_key(cls, key: str) -> Owner:
        """The owner a key names: its kind, name and uid, the rest empty (what the history keeps)."""
        kind, _, name = key.partition(":")
        if kind == "plain" or not name:
            return PLAIN
        if kind == "user-service":
            uid, _, unit = name.partition(":")
            return cls("user-service", unit, uid=int(uid) if uid.isdigit() else None)
        # A kind this version does not know (a newer one's) keeps its key as written.
        return cls(cast(OwnerKind, kind), name)


PLAIN = Owner("plain")


# The code of each veto a decision makes before any signal.
DECISION_CODES: dict[DecisionKind, ReasonCode] = {
    "protect": "protected", "veto-frozen": "frozen", "veto-stopped": "stopped",
    "veto-sigint-ignored": "sigint-ignored", "veto-sigint-blocked": "sigint-blocked",
    "veto-supervised": "supervised", "veto-unconfirmed": "unconfirmed",
    "veto-jupyter": "jupyter-kernel", "veto-never": "unsignallable",
}


def reason_about(code: ReasonCode, text: str, holder: Holder, owner: str | None = None) -> Reason:
    """A reason about one holder: its pid, comm and unit, and its owner's key."""
    return Reason(code, text, holder.pid, holder.comm, holder.unit, owner)

"""The drain in rounds: signal the holders, wait for their exits, rescan for respawned jobs.

A supervisor may restart a drained job, or a new job may start while the
guard waits: after each round the nodes are scanned again, and whatever
appeared goes through the policy and into the next round, up to
``[drain] rounds``. Before the signal each holder's supervisor is asked to
keep it down until restore (the guard signals every holder itself).
"""

from __future__ import annotations

import select
import time
from collections.abc import Sequence
from functools import partial

from suspendguard.config import RestoreConfig
from suspendguard.guard import advice
from suspendguard.guard.device_view import refused_pids
from suspendguard.guard.restore import restore
from suspendguard.guard.run_state import NO_TAGS, RunState, Tags
from suspendguard.guard.said import NOTHING, Said
from suspendguard.guard.scan import scan_holders, scan_until
from suspendguard.model import (
    CONTAINER_KINDS,
    Decision,
    Holder,
    HolderId,
    Inventory,
    NodeKey,
    Outcome,
    ScanResult,
    holder_id,
    reason_about,
)
from suspendguard.record import Stop
from suspendguard.system import runner
from suspendguard.verdict import Reason

# How long an unknown supervisor (a live parent) gets to restart a drained job
# before the rescan; a known one gets its own restart delay.
RESPAWN_GRACE_S = 0.5
# A supervisor's restart delay is waited for up to this long, plus a margin
# for the restarted job to open its nodes.
MAX_RESTART_WAIT_S = 5.0
RESTART_MARGIN_S = 0.2
UNREAD_RESTART_S = 0.1  # systemd's default RestartSec=, for a unit whose own was not read


def signal(r: RunState, decisions: Sequence[Decision], reserve: float, round_no: int = 1,
           tags: Tags = NO_TAGS) -> tuple[bool, Said]:
    """:meth:`RunState.signal`, each supervisor asked first to keep its job down."""
    keep = partial(keep_down, r) if r.options.supervisors is not None else None
    return r.signal(decisions, reserve, round_no, tags, keep=keep)


def drain(r: RunState, first: list[Decision], look: ScanResult, inventory: Inventory,
          reserve: float, restore_config: RestoreConfig) -> tuple[Said, list[int]]:
    """The drain in rounds: what it found, and the pids its rescans could not read (any of
    them may be a job started meanwhile); a drain that fails half-way puts the owners
    back first.

    ``look``: the look's scan: every holder it found, and the nodes each held
    then, so that only a new one, or one that has taken a compute node since,
    is decided again; and the processes it listed, whose mappings the rescans
    do not read again. ``reserve``: the seconds of the deadline kept for the
    device's check after the drain.
    """
    try:
        return drain_rounds(r, first, {holder_id(h): compute_nodes(h) for h in look.holders},
                            inventory, reserve, look.listed)
    except BaseException:
        # Nothing may stay Restart=no (or a container's policy no) because
        # the guard broke; the error itself goes on to the caller.
        if r.stops and r.options.supervisors is not None:
            restore(r.stops, r.options.supervisors, restore_config,
                    enabled=restore_config.after_veto, record=r.ledger.restored,
                    log=r.options.log.info, warn=r.options.log.warning,
                    journal=r.options.log.journal, draining=r.ledger.still_draining)
        raise


def drain_rounds(r: RunState, first: list[Decision], seen: dict[HolderId, frozenset[NodeKey]],
                 inventory: Inventory, reserve: float,
                 listed: frozenset[int] = frozenset()) -> tuple[Said, list[int]]:
    """Drain ``first``, then whatever appears in its place, round after round; and the pids
    the rescans could not read.

    ``seen``: the compute nodes of each holder known so far. One left alone
    for the nodes it held (management nodes only, an NVIDIA graphics client)
    that has taken a compute node since is decided again, as a new one is.
    ``listed``: the processes the look listed, whose mappings it read.
    """
    said = NOTHING
    unreadable: set[int] = set()
    pending = first
    round_no = 1
    tags: Tags = NO_TAGS
    parents = {d.holder.ppid for d in first if d.holder.ppid > 1}
    units = {d.holder.unit for d in first if d.holder.unit}
    while pending:
        if r.cancelled:
            for d in pending:
                r.record(d, Outcome("not-signalled", why=r.deadline.cancel_reason), round_no)
            return said, sorted(unreadable)
        gone, signalled = signal(r, pending, reserve, round_no, tags)
        said += signalled
        if not gone or r.cancelled:
            return said, sorted(unreadable)
        respawn_grace(r, pending)
        control = r.options.supervisors
        if r.stops and control is not None:
            back = control.settle(r.stops, r.deadline)
            said += Said.warn(*control.take_warnings())
            if back:
                said += Said.veto(*(Reason("restarted", why) for why in back))
                return said, sorted(unreadable)
        # Rescan: a supervisor may have restarted the job, or a new one started.
        # The mappings of new processes only (a child a holder forked since
        # inherits its mappings); a restarted job opens its nodes first, and
        # a mapping without an fd comes later in a job's life. This keeps the
        # step between the last exit and the verdict short.
        rescan = scan_holders(inventory, r.options.proc, exclude=runner.active_children(),
                              maps_known=listed, until=scan_until(r.deadline.left()))
        refused, warned = refused_pids(rescan)  # as root, a refused map_files read too
        unreadable.update(refused)
        said += warned
        new = [h for h in rescan.holders if holder_id(h) not in seen]
        took = [h for h in rescan.holders
                if holder_id(h) in seen and not compute_nodes(h) <= seen[holder_id(h)]]
        seen.update({holder_id(h): compute_nodes(h) for h in new + took})
        tags = {
            holder_id(h): "respawned" for h in new
            if (h.ppid > 1 and h.ppid in parents) or (h.unit and h.unit in units)
        }
        parents |= {h.ppid for h in new if h.ppid > 1}
        units |= {h.unit for h in new if h.unit}
        new += took
        round_no += 1
        decisions = r.decide(new, respawned=tags)
        pending, settled = r.settle(decisions, round_no, tags)
        said += settled
        before = {holder_id(h) for h in took}
        for d in pending:
            r.record(d, Outcome("not-signalled", why=(
                "took a compute node during the drain" if holder_id(d.holder) in before
                else "appeared during the drain")), round_no, tags)
        if any(d.vetoes for d in decisions):
            return said, sorted(unreadable)  # certain veto now: signal nobody else
        if pending and round_no > r.drain.rounds:
            for d in pending:
                respawned = holder_id(d.holder) in tags
                said += Said.veto(reason_about(
                    "respawned" if respawned else "appeared", advice.left_reason(
                        d.holder, respawned, r.drain.rounds, r.options.proc,
                        held_before=holder_id(d.holder) in before), d.holder,
                    r.owner(d.holder).key))
            return said, sorted(unreadable)
    return said, sorted(unreadable)


def compute_nodes(h: Holder) -> frozenset[NodeKey]:
    """The compute nodes ``h`` holds: what makes a holder one to drain."""
    return frozenset(n.node.key for n in h.nodes if n.node.role == "compute")


def keep_down(r: RunState, holders: Sequence[Holder]) -> Said:
    """Before the signal: ask each holder's supervisor not to start it again.

    The guard signals every holder itself; the supervisor is asked only
    to keep the job down until restore (and is then asked to start it).
    """
    control = r.options.supervisors
    assert control is not None
    said = NOTHING
    owners = {}
    kept = {s.owner.key for s in r.stops}  # down since an earlier round: its record stands
    for h in holders:
        o = r.owner(h)
        if o.key in kept:
            continue
        if ((o.kind in ("systemd-service", "user-service")
                and o.activity in ("active", "activating", "reloading"))
                or (o.kind in ("docker", "podman") and o.activity == "running")):
            owners[o.key] = o
        elif o.kind != "plain" and not o.activity:
            warning = (f"{o.describe()}: the container engine could not be reached ({o.note}); "
                       "its processes were signalled directly, and the container's restart "
                       "policy may bring it back" if o.kind in CONTAINER_KINDS else
                       f"{o.describe()}: its unit could not be read ({o.note}); its processes "
                       f"were signalled directly, and its Restart= may start it again")
            if warning not in said.warnings:
                said += Said.warn(warning)
    if not owners:
        return said
    # Numbered for the whole run: a refused stop is not in r.stops, but its number is taken.
    planned = {o.key: Stop(o, seq, time.time())
               for seq, o in zip(r.ledger.orders(len(owners)), owners.values(), strict=True)}
    unwritten = r.ledger.stopping(list(planned.values()))
    if unwritten:
        # A stop restore cannot read would leave the job down after resume, unsaid.
        return said + Said.warn(*(
            f"{o.name}: not kept from restarting through {advice.via(o)}: {unwritten}, and "
            "restore could not start it again; its processes are signalled directly"
            for o in owners.values()))
    answers = control.stop(list(owners.values()), r.drain.signal, r.drain.timeout_s)
    said += Said.warn(r.ledger.stopped(list(planned.values()), answers),
                      *control.take_warnings())
    ok = set()
    for key, why in answers.items():
        o = owners[key]
        if why:
            said += Said.warn(
                f"{o.name}: could not keep it from restarting through {advice.via(o)} "
                f"({why}); the guard signals its processes itself")
            continue
        ok.add(key)
        r.stops.append(planned[key])
        raised = ("" if o.kind in CONTAINER_KINDS or not 0 < o.timeout_stop_s < r.drain.timeout_s
                  else f" (its TimeoutStopSec={o.timeout_stop_s:g}s raised to [drain] timeout_s)")
        r.options.log.info(f"keeping {o.describe()} down through {advice.via(o)} until restore"
                           f"{raised}; its holders get {r.drain.signal} from the guard")
    r.through |= {holder_id(h) for h in holders if r.owner(h).key in ok}
    return said


def respawn_grace(r: RunState, drained: Sequence[Decision]) -> None:
    """Give a supervisor a moment to restart what it supervised before the rescan.

    A job signalled around a supervisor that restarts it (a service whose
    stop through systemd failed, a container with a restart policy) gets
    that supervisor's own restart delay; a job whose parent is still there
    and could restart it (not init, not the guard itself, whose children are
    supervised by nobody else) gets RESPAWN_GRACE_S. A job whose supervisor
    keeps it down is not restarted by it; what else may bring it back is
    looked at afterwards (the supervisors' ``settle``). A container with a
    restart policy, set aside through its engine, gets its restart delay all
    the same: an engine that starts it again anyway is caught by that look.
    """
    wait = 0.0
    for d in drained:
        owner = r.owner(d.holder)
        through = holder_id(d.holder) in r.through
        if not owner.restarts or (through and owner.kind not in CONTAINER_KINDS):
            continue
        delay = owner.restart_delay_s if owner.restart else UNREAD_RESTART_S
        wait = max(wait, min(MAX_RESTART_WAIT_S, delay) + RESTART_MARGIN_S)
    parents = {d.holder.ppid for d in drained
               if holder_id(d.holder) not in r.through} - r.never - {0, 1}
    if any(r.options.proc.exists(p) for p in parents):
        wait = max(wait, RESPAWN_GRACE_S)
    if wait <= 0:
        return
    wait = min(wait, r.deadline.left())
    fd = r.deadline.cancel_fd
    if fd is not None:
        select.select([fd], [], [], wait)
    else:
        time.sleep(wait)

"""The look before anyone is signalled: the nodes, their holders, the decisions, the device's view.

Only the built-in families have idle backends; a device nobody can answer
for, or a process the device reports and this host cannot see, is a
certain veto found here, before the drain would stop any job.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from suspendguard.config import FAMILIES, DevicesConfig, IdleConfig
from suspendguard.guard import device_view
from suspendguard.guard.inventory import device_families, take_inventory
from suspendguard.guard.run_state import IdleCheck, RunState
from suspendguard.guard.said import Said
from suspendguard.guard.scan import scan_holders, scan_until
from suspendguard.idle.base import IdleReport
from suspendguard.model import Decision, Inventory, ScanResult
from suspendguard.store.lock import GuardLock
from suspendguard.system import runner


@dataclass(frozen=True, slots=True)
class Look:
    """What the run found before anyone is signalled."""

    inventory: Inventory
    devices: tuple[str, ...]  # the family of each device found, once per device
    scan: ScanResult
    decisions: list[Decision]
    first: IdleReport | None  # the device's view before the drain, when asked
    idle_check: IdleCheck | None  # None when no backend answers for the nodes found
    said: Said  # what the look found; its reasons are certain vetoes
    unknown: Said  # why the verdict cannot be known (processes the scan could not read)


def look(devices: DevicesConfig, idle: IdleConfig, r: RunState, lock: GuardLock) -> Look:
    """The nodes, their holders, the decisions on them, and the device's own view first."""
    inventory = take_inventory(devices)
    families = inventory.families()
    found = device_families(inventory)  # read once: the driver's GPU list may change
    idle_check = r.options.idle_check
    if idle_check is device_view.default_idle_check and not set(families) & set(FAMILIES):
        idle_check = None
    # Locked out: another run is draining these very holders; look at none.
    scan = (ScanResult((), 0, (), 0) if lock.refused else
            scan_holders(inventory, r.options.proc, exclude=runner.active_children(),
                         until=scan_until(r.deadline.left())))
    refused, said = device_view.refused_pids(scan)
    said = Said.warn(*inventory.notes) + said
    decisions = r.decide(scan.holders)
    # The device's own view before anyone is signalled: what it reports and
    # this host cannot see, or a device nobody can answer for, is a certain
    # veto, and every job the drain would stop first is spared. Only worth a
    # query when someone would be signalled, or the scan could not read all.
    first: IdleReport | None = None
    if (idle_check is not None and inventory.nodes and not lock.refused
            and (refused or any(d.signals for d in decisions))):
        first, asked = device_view.ask_first(r, idle_check, idle, found)
        extra, hidden = device_view.device_holders(r, first, {h.pid for h in scan.holders})
        decisions += extra
        said += asked + hidden
    # The guard's own probe killed at its timeout (here or by an earlier run of this process)
    # that is still there: stuck in the driver. The scan sees it as the holder it is.
    said += device_view.stuck_children(runner.abandoned(), time.monotonic())
    hidepid = r.options.proc.hidepid() if os.geteuid() != 0 and inventory.nodes else ""
    unknown = device_view.uninspected(refused, first, found, hidepid)
    return Look(inventory, found, scan, decisions, first, idle_check,
                Said((*said.reasons,), (*said.warnings, *unknown.warnings)),
                Said(unknown.reasons))

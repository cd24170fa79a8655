"""The device asked once the drain is over, and its answer folded into the verdict.

A process the device reports but the scan missed (a container the guard
could not read) goes through the same policy and drain; the device is then
asked again, and a process it reports only then vetoes, unsignalled (it
appeared after the drain). A dry run's device is still busy with the jobs a real run
would drain first: that is said, not vetoed; a family no backend can answer for vetoes
as in a real run.
"""

from __future__ import annotations

from suspendguard.config import IdleConfig
from suspendguard.guard import device_view, rounds
from suspendguard.guard.look import Look
from suspendguard.guard.report import IdleSkipped
from suspendguard.guard.run_state import RunState
from suspendguard.guard.said import NOTHING, Said
from suspendguard.idle.base import IdleReport
from suspendguard.model import Outcome, reason_about
from suspendguard.verdict import Reason


def confirm_idle(r: RunState, look: Look, certain_veto: bool, config: IdleConfig,
                 refused: str = "") -> tuple[IdleReport | IdleSkipped, Said]:
    """The device's answer after the drain, or why it was not asked; and what it makes of it.

    ``refused``: "veto" or "unknown" when the suspend is refused already (before or by
    the drain): a process the device reports now is then not signalled.
    """
    families = look.devices
    if not look.inventory.nodes:
        return IdleSkipped("none", "no accelerator nodes found"), NOTHING
    if look.idle_check is None:
        return IdleSkipped("none", "no idle backend for the nodes found ("
                           + ", ".join(dict.fromkeys(families)) + ")"), NOTHING
    if certain_veto and look.first is not None:
        return look.first, NOTHING  # what the device said before the drain, and why it vetoed
    if certain_veto and not r.options.dry_run:
        return IdleSkipped("skipped", "the verdict was already veto"), NOTHING
    if r.cancelled:
        return IdleSkipped("skipped", "the guard was stopped"), NOTHING
    idle = look.idle_check(config, families, r.deadline.at_least(0.5))
    extra, reported = device_view.device_holders(r, idle)
    to_drain, said = r.admit(extra, refused)
    if to_drain:
        said += rounds.signal(r, to_drain, reserve=config.settle_s + 1.0)[1]
        if not r.cancelled:
            drained = idle
            idle = look.idle_check(config, families, r.deadline.at_least(0.5))
            said += appeared_after(r, idle, drained)
    said += reported
    unknown = {why: family for family, why in idle.unknown}
    busy = {why: device for device, why in idle.busy}
    # A dry run's devices still compute for the jobs a real run would drain first: their load
    # is expected. A family no backend can answer for stays so whatever is drained.
    expected = r.options.dry_run and any(hr.decision.action == "drain" for hr in r.results.values())
    said += Said.warn(*(f"(expected before the drain) {why}" for why in idle.veto_reasons
                        if expected and why not in unknown))
    said += Said.veto(*(Reason("device-unknown", why, device=unknown[why]) if why in unknown
                        else Reason("device-busy", why, device=busy.get(why))
                        for why in idle.veto_reasons if not expected or why in unknown))
    return idle, said + Said.warn(*idle.warnings)


def appeared_after(r: RunState, idle: IdleReport, before: IdleReport) -> Said:
    """What the device's reading after the drain of the holders only it reported makes of
    its process list: one it reports now that no step handled (nor the reading ``before``
    named) vetoes, named, and is never signalled: the drain is over, and there is no
    rescan or respawn grace after it. One the policy leaves alone says so, as in the look.
    """
    late, said = device_view.device_holders(r, idle, {int(p.pid) for p in before.processes()})
    seen = {k[0] for k in r.results}  # left alone for its nodes, listed as compute only now
    round_no = 1 + max((hr.round for hr in r.results.values()), default=0)
    to_signal, settled = r.settle(late, round_no)
    said += settled
    for d in to_signal:
        h = d.holder
        how = ("which it lists as a compute process only after the drain" if h.pid in seen
               else "which appeared after the drain (a job started or restarted meanwhile)")
        r.record(d, Outcome("not-signalled", why="appeared after the drain"), round_no)
        said += Said.veto(reason_about("appeared", (
            f"the device ({h.source}) reports pid {h.pid} {h.comm}, {how}: not signalled; "
            "it may hold the device: stop it or let it end, then suspend again"), h,
            r.owner(h).key))
    return said

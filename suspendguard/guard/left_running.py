"""The vetoes of holders a drain left running: one stopped before its signal, one it could
not signal, one still there at the end of its wait."""

from __future__ import annotations

from suspendguard.guard import advice, jobs, jupyter
from suspendguard.guard.drain import DrainResult
from suspendguard.guard.handles import UNSIGNALLABLE
from suspendguard.guard.job_stop import JobStop
from suspendguard.guard.policy import stopped_reason
from suspendguard.model import Decision, Owner, holder_id, reason_about
from suspendguard.verdict import Reason


def stopped_veto(d: Decision, state: str, owner: Owner) -> Reason:
    """The veto of a holder found stopped (``state``) when its signal was due."""
    h = d.holder
    return reason_about("stopped", stopped_reason(f"pid {h.pid} {h.comm}", h.pid, state,
                                                  "when the signal was due"), h, owner.key)


def left_running(d: Decision, result: DrainResult, plan: jobs.Plan, stop: JobStop, owner: Owner,
                 kept_down: bool, took: str) -> tuple[Reason, ...]:
    """The veto of a holder the drain left running: one it could not signal, or a timeout.

    ``kept_down``: its supervisor keeps it from restarting; ``took``: its earlier drain times,
    in words ("" where none)."""
    h = d.holder
    outcome = result.outcomes[holder_id(h)]
    running = {key for key, o in result.outcomes.items() if o.kind in ("timeout", "not-signalled")}
    if outcome.kind == "not-signalled" and outcome.why.startswith(UNSIGNALLABLE):
        # By the job's shape: a second signal, or one to a rank beside its launcher's, would
        # cost the job the save the drain was for.
        way = (jupyter.SHUT_DOWN if holder_id(h) in stop.asks  # SIGINT never ends a kernel
               else advice.unsignalled_remedy(d, plan, stop, running, result.forwarded_at.keys()))
        return (reason_about("unsignallable", (
            f"pid {h.pid} {h.comm} {outcome.why}: it still holds the device; {way}"), h,
            owner.key),)
    if outcome.kind != "timeout":
        return ()
    by = f" (reported by {h.source})" if h.source != "proc" else ""
    if kept_down:
        by += f" ({owner.short_name}, kept from restarting by {advice.via(owner)})"
    cut = " (the wait was cut short by the deadline)" if result.shortened else ""
    remedy = advice.timeout_remedy(d, plan, stop, running, result.unforwarded, result.wait_s)
    return (reason_about("timeout-after-sigint", (
        f"pid {h.pid} {h.comm}{by} {outcome.why}{cut}" + (f" ({took})" if took else "")
        + f": {remedy}"), h, owner.key),)


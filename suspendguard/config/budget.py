"""How one guard run's deadline is shared: the drain wait, the idle check, the answer.

The pipeline and the config check read the same figures, so a valid
configuration's drain wait is never cut short by the deadline in the first
drain round.
"""

from __future__ import annotations

from collections.abc import Sequence

# Left at the end of every run to record the verdict and answer before
# systemd's TimeoutStartSec.
ANSWER_MARGIN_S = 2.0
# The restore right after a veto: it starts once the verdict is recorded
# (by deadline_s - ANSWER_MARGIN_S) and must end inside the unit's
# TimeoutStartSec, deadline_s + 20 s (install/templates.py): a start job
# still running then is reported "starting", not waited for.
RESTORE_AFTER_VETO_S = 15.0
# The resume unit's restore (its TimeoutStartSec is 120 s).
RESTORE_AFTER_RESUME_S = 100.0
# Beyond [idle] settle_s and command_timeout_s: the idle check's own start.
IDLE_MARGIN_S = 1.0


def idle_reserve_s(settle_s: float, command_timeout_s: float) -> float:
    """Seconds the drain leaves for the idle check, when an idle backend applies."""
    return settle_s + command_timeout_s + IDLE_MARGIN_S


def needed_s(timeout_s: float, escalate_waits: Sequence[float], idle_backends: bool,
             settle_s: float, command_timeout_s: float) -> float:
    """The smallest ``[drain] deadline_s`` that lets the whole drain wait run.

    With idle backends the device is also read once before the drain
    (guard/device_view.py): one more ``command_timeout_s`` at most.
    """
    idle = idle_reserve_s(settle_s, command_timeout_s) + command_timeout_s \
        if idle_backends else 0.0
    return timeout_s + sum(escalate_waits) + idle + ANSWER_MARGIN_S

"""The health check's answers, typed: each device healthy, unhealthy with the reason, or unknown.

One answer is a :class:`~suspendguard.record.DeviceHealth`, the record the
history keeps too; this module gathers them into a report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from suspendguard.idle.base import Backend, QueryFailed
from suspendguard.record import DeviceHealth

# The signature of the known after-resume failure that a reload of
# nvidia_uvm repairs: cuInit answers CUDA_ERROR_UNKNOWN (999).
UVM_SIGNATURE = "cuda-999"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """Every device's answer, worst first per device, and what could not be asked."""

    devices: tuple[DeviceHealth, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def unhealthy(self, family: str | None = None) -> tuple[DeviceHealth, ...]:
        return tuple(d for d in self.devices if d.state == "unhealthy"
                     and (family is None or d.family == family))

    def families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.family for d in self.devices))

    @property
    def healthy(self) -> bool:
        """Nothing holds the jobs back (no device unhealthy); true of a check of no device."""
        return not self.unhealthy()

    def summary(self) -> str:
        bad = self.unhealthy()
        if bad:
            return "; ".join(d.describe() for d in bad)
        if not self.devices:
            return "no device to check"
        return ", ".join(d.describe() for d in self.devices)

    def to_json(self) -> dict[str, Any]:
        # A check that reached no device (no tool answered) is no clean bill: null, not known.
        return {"healthy": self.healthy if self.devices else None,
                "devices": [d.to_json() for d in self.devices], "notes": list(self.notes)}


def merge(answers: Sequence[DeviceHealth]) -> tuple[DeviceHealth, ...]:
    """Per device its worst state, unhealthy over unknown over healthy, the first of each kind;
    of the unhealthy, the first of each source: CUDA's 999, NVML's lost GPU and the kernel
    log's Xid 79 may all answer for the family as a whole, and which repair fits (or that none
    does) depends on every one of them.

    A family-wide answer (device == family) that is unhealthy stands for
    every device of that family, so it is kept beside theirs.
    """
    rank = {"unhealthy": 0, "unknown": 1, "healthy": 2}
    out: dict[str, list[DeviceHealth]] = {}
    for answer in answers:
        have = out.get(answer.device)
        if have is None or rank[answer.state] < rank[have[0].state]:
            out[answer.device] = [answer]
        elif (answer.state == have[0].state == "unhealthy"
              and answer.source not in {d.source for d in have}):
            have.append(answer)
    return tuple(d for kept in out.values() for d in kept)


# What one check answers: the devices' answers, and a note ("" for none).
Answer = tuple[list[DeviceHealth], str]


def ask(backend: Backend, what: str, query: Callable[[], list[DeviceHealth]],
        failed: Callable[[QueryFailed], Answer]) -> Answer:
    """``query()`` if ``backend`` is here, ``failed(exc)`` if it raised; ([], why) if not here."""
    available, why = backend.probe()
    if not available:
        return [], f"{what} not asked: {why}"
    try:
        return query(), ""
    except QueryFailed as exc:
        return failed(exc)


def not_listed(before: Mapping[str, str] | None, prefix: str, listed: Iterable[str],
               family: str, source: str, what: str = "",
               key: Callable[[str], str] = str) -> list[DeviceHealth]:
    """The devices the guard read before the suspend (``before``: by id, their own health word
    or "") whose id starts with ``prefix`` that ``source`` (in words ``what``) does not list
    after resume: a device that did not come back is in no answer at all, so nothing else
    judges it. ``key``: one name for a device that two ids may name."""
    now = {key(ident) for ident in listed}
    earlier = {key(ident): (ident, word) for ident, word in (before or {}).items()
               if ident.startswith(prefix)}
    return [DeviceHealth(ident, family, "unhealthy", f"not listed by {what or source} after "
                         f"resume (before the suspend: {word or 'listed'})", source)
            for k, (ident, word) in earlier.items() if k not in now]

"""Ascend after resume: npu-smi's health per chip, a device open through pyACL, the catalog.

A device not ready yet after resume answers ``Resource_Busy(EL0005)`` or
``halDeviceOpen failed`` (the catalog's device-busy finding, from the logs
read when the system woke): the repair for that is to wait. A lost
heartbeat means the device reset, which no wait undoes: npu-smi may read
the chip healthy again, and the logs still say it. npu-smi's Health column reads OK,
Warning, Alarm, Critical (or a code while the chip is not up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from suspendguard.config import Config
from suspendguard.health.model import Answer, ask, not_listed
from suspendguard.idle.acl import AclBackend, RuntimeFailed
from suspendguard.idle.base import QueryFailed
from suspendguard.idle.npusmi import NpuSmiBackend
from suspendguard.logs.journal import from_journal
from suspendguard.record import DeviceHealth, FindingRecord

FAMILY = "ascend"
# npu-smi's words from the least to the most severe (a minor, a major, a critical alarm).
# Some boards read Alarm in plain use (a 310B4 edge board, tests/fixtures/npu-smi): a chip
# whose word is no worse than before the suspend was not harmed by it.
SEVERITY = ("ok", "warning", "alarm", "critical")
# The catalog's rules (logs/rules.py) that say the device is not usable
# after resume, with the words a held job's reason uses.
CATALOG: Mapping[str, str] = {
    "heartbeat-lost": "the host lost the device's heartbeat (the device reset)",
    "device-busy": "the device answered busy (not ready after resume)",
}
# The rules the wait answers: a device busy because it was not ready yet is ready once
# npu-smi and pyACL read it healthy. The others stay: the logs recorded what happened.
WAITED_FOR = frozenset({"device-busy"})


def npu_smi_check(config: Config, timeout_s: float,
                  before: Mapping[str, str] | None = None) -> Answer:
    """npu-smi's Health per chip, judged against the chip's word before the suspend where
    ``before`` has one; ([], why) when npu-smi is not here."""
    backend = NpuSmiBackend(config.idle)
    earlier = {_chip(ident): (ident, word) for ident, word in (before or {}).items()
               if ident.startswith("npu ")}
    # By default OK and Warning: a chip that reports something minor (a temperature) works.
    good = {w.lower() for w in config.resume.ascend_healthy}

    def chips() -> list[DeviceHealth]:
        out = []
        listed = backend.health(timeout_s)
        for ident, word in listed:
            said = f"npu-smi health {word or '(blank)'}"
            then = earlier.get(_chip(ident), ("", None))[1]
            if word.strip().lower() in good:
                out.append(DeviceHealth(ident, FAMILY, "healthy", "", "npu-smi"))
            elif _no_worse(word, then):
                out.append(DeviceHealth(ident, FAMILY, "healthy",
                                        f"{said}, as before the suspend", "npu-smi"))
            else:
                out.append(DeviceHealth(ident, FAMILY, "unhealthy", said + (
                    f" (before the suspend: {then})" if then else ""), "npu-smi"))
        return out + not_listed(before, "npu ", (ident for ident, _ in listed), FAMILY,
                                "npu-smi", key=_chip)

    def failed(exc: QueryFailed) -> Answer:
        # npu-smi is here but cannot read the board: after resume, a device
        # that is not ready answers this way.
        return [DeviceHealth(FAMILY, FAMILY, "unhealthy", f"npu-smi: {exc}", "npu-smi")], ""

    return ask(backend, "npu-smi", chips, failed)


def _chip(ident: str) -> str:
    """One name for a chip: an NPU's only chip is "npu N", which is chip 0 of "npu N chip 0"
    once the NPU lists two (idle/base.py's ascend_device_id), or lost its other one."""
    return ident if " chip " in ident else f"{ident} chip 0"


def _no_worse(now: str, then: str | None) -> bool:
    """Whether npu-smi's word ``now`` is a known one, no more severe than ``then``, and short of
    Critical: a critical alarm is no board's plain use, and jobs are not started on it because
    it read so before the suspend too (``[resume] ascend_healthy`` may still list it)."""
    words = [w.strip().lower() for w in (now, then or "")]
    if not all(w in SEVERITY for w in words) or words[0] == "critical":
        return False  # a code while the chip is not up, or no word before: as today
    return SEVERITY.index(words[0]) <= SEVERITY.index(words[1])


def acl_check(config: Config, timeout_s: float,
              before: Mapping[str, str] | None = None) -> Answer:
    """aclrtSetDevice and aclrtResetDevice on each device, in a child; ([], why) without CANN.
    A device pyACL read before the suspend (``before``) and does not count now is unhealthy,
    as is each of them when the runtime fails; an ``acl`` that cannot be imported is unknown."""
    backend = AclBackend(config.idle)

    def opened() -> list[DeviceHealth]:
        found = [DeviceHealth(f"device {dev}", FAMILY, "healthy" if ret == 0 else "unhealthy",
                              "" if ret == 0 else f"aclrtSetDevice returned {ret}", "acl")
                 for dev, ret in backend.open_devices(timeout_s)]
        return found + not_listed(before, "device ", (d.device for d in found), FAMILY, "acl",
                                  "pyACL")

    def failed(exc: QueryFailed) -> Answer:
        if not isinstance(exc, RuntimeFailed):  # no CANN here, or the guard was stopped
            return [DeviceHealth(FAMILY, FAMILY, "unknown", str(exc), "acl")], ""
        # The runtime there and failing after resume (acl.init() or the count an error, the
        # child crashed or hung) is a device that does not answer: none of its devices opens.
        return [DeviceHealth(FAMILY, FAMILY, "unhealthy", str(exc), "acl"),
                *not_listed(before, "device ", (), FAMILY, "acl", "pyACL")], ""

    return ask(backend, "pyACL", opened, failed)


def catalog_check(findings: Iterable[FindingRecord],
                  since: datetime | None = None) -> list[DeviceHealth]:
    """The catalog's findings in the logs since the attempt began (``since``). The device
    logs are read from a little before it, for a device clock that runs behind: a line
    stamped before the attempt is not the suspend's doing. A unit's journal is read from
    the attempt's start by its own epoch, so none of its findings is before it; its stamp,
    naive local time, would read so in the hour the clocks go back."""
    seen = dict.fromkeys(f.rule for f in findings if since is None or not _before(f, since))
    return [DeviceHealth(FAMILY, FAMILY, "unhealthy", f"{CATALOG[rule]} (the {rule} finding)",
                         "catalog") for rule in seen if rule in CATALOG]


def lasting(findings: Iterable[FindingRecord]) -> list[FindingRecord]:
    """Of ``findings``, those a wait for the device cannot answer (the wait's checks keep them)."""
    return [f for f in findings if f.rule not in WAITED_FOR]


def _before(finding: FindingRecord, since: datetime) -> bool:
    """Whether ``finding``'s own stamp (a device log's, naive local time, or one with its
    offset) is before ``since`` (naive local time); one without a stamp, or from a unit's
    journal, is not."""
    if finding.time is None or from_journal(finding.file):
        return False
    try:
        when = datetime.fromisoformat(finding.time)
    except ValueError:
        return False
    if when.tzinfo is not None:
        return when < since.astimezone()
    return when < since

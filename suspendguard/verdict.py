"""Verdicts and their reasons: allow, veto or unknown, and why, each reason with its stable code.

The bottom of the house beside model.py: what every layer that gives,
records, shows or acts on a verdict shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

# unknown: the guard cannot tell (not root and processes it could not inspect,
# an invalid config, a missing interpreter); never read as allow.
VerdictKind = Literal["allow", "veto", "unknown"]

# The exit status of each verdict (errors.EXIT_ALLOW, EXIT_VETO, EXIT_UNKNOWN).
VERDICT_EXIT_STATUS: dict[VerdictKind, int] = {"allow": 0, "veto": 1, "unknown": 5}

# Why a suspend was refused, as a code that stays the same across versions
# and wordings: what status, the metrics, the journal and whoever acts on a
# refusal read. docs/json-and-metrics.md has the table; a test holds the two
# together.
ReasonCode = Literal[
    "protected", "frozen", "stopped", "sigint-ignored", "sigint-blocked", "supervised",
    "unconfirmed", "jupyter-kernel", "unsignallable", "timeout-after-sigint", "restarted",
    "respawned", "launcher-running", "appeared", "device-busy", "device-unknown", "device-hidden-holder",
    "guard-busy", "guard-stopped", "guard-failed", "uninspected", "setup-refused", "interrupted",
    "unhealthy-after-resume", "unrecorded",
    # a cluster's node (suspendguard slurm)
    "node-unreachable", "held-outside-slurm", "power-action-failed", "health-unknown",
    "device-unhealthy",
]
REASON_CODES: tuple[ReasonCode, ...] = get_args(ReasonCode)

@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a suspend is refused: its stable code, its words, and what it is about.

    ``pid``, ``comm`` and ``unit`` name a holder, ``owner`` its supervisor
    (``Owner.key``), ``device`` a device family or device; None where the
    reason is not about one.
    """

    code: ReasonCode
    text: str
    pid: int | None = None
    comm: str | None = None
    unit: str | None = None
    owner: str | None = None
    device: str | None = None

    @property
    def identity(self) -> tuple[object, ...]:
        """The reason without its words' figures, which change at every look (a busy device's
        load): its code and what it is about; its words where it is about nothing in particular."""
        about = (self.pid, self.comm, self.unit, self.owner, self.device)
        return (self.code, *about) if about != (None,) * 5 else (self.code, self.text)

    def to_json(self) -> dict[str, Any]:
        """One entry of ``reason_details``: every key present, None where it does not apply."""
        return {"code": self.code, "text": self.text, "pid": self.pid, "comm": self.comm,
                "unit": self.unit, "owner": self.owner, "device": self.device}

    @classmethod
    def from_json(cls, doc: Any) -> Reason:
        """An entry as ``to_json`` wrote it; ValueError when it is not one."""
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
            raise ValueError(f"not a reason: {doc!r}")
        code = doc.get("code")
        pid = doc.get("pid")

        def word(key: str) -> str | None:
            value = doc.get(key)
            return value if isinstance(value, str) else None
        return cls(cast(ReasonCode, code) if code in REASON_CODES else "unrecorded",
                   doc["text"], pid if isinstance(pid, int) else None, word("comm"),
                   word("unit"), word("owner"), word("device"))


@dataclass(frozen=True, slots=True)
class Verdict:
    """allow, veto or unknown, with its reasons (for unknown: why the guard cannot tell)."""

    kind: VerdictKind
    reasons: tuple[Reason, ...]
    warnings: tuple[str, ...] = ()

    @property
    def exit_status(self) -> int:
        return VERDICT_EXIT_STATUS[self.kind]

    @property
    def texts(self) -> tuple[str, ...]:
        """The reasons' words, in order (the ``reasons`` of every JSON)."""
        return tuple(r.text for r in self.reasons)

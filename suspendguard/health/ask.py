"""Asking an idle backend for a health answer: only when it probes OK, its failure answered too."""

from __future__ import annotations

from collections.abc import Callable

from suspendguard.health.model import DeviceHealth
from suspendguard.idle.base import Backend, QueryFailed

Answer = tuple[list[DeviceHealth], str]  # the answers, and a note ("" for none)


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

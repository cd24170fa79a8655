"""One clock for the sleep path: the deadline every wait of a guard run is cut to.

A guard run sets its deadline once (:func:`bounded`); each client that
waits on something outside the guard (D-Bus, a container engine's socket,
a child run as a user) asks :func:`cap` for its timeout instead of using its
own default alone, and stops waiting when the run is cancelled (SIGTERM to
the guard: :attr:`Deadline.cancel`). A module-level current deadline, not
one more argument through every client: the clients sit below the guard,
which is the only one that knows the run's clock, and a call made outside
any run (``status``, a test) keeps its own timeout.
"""

from __future__ import annotations

import contextlib
import math
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from suspendguard.system.cancel import Cancel


@dataclass(frozen=True, slots=True)
class Deadline:
    """A monotonic time no wait may pass, and the cancel that ends every wait early."""

    at: float
    cancel: Cancel | None = None
    clock: Callable[[], float] = time.monotonic

    def left(self) -> float:
        return max(0.0, self.at - self.clock())

    def cap(self, timeout: float) -> float:
        return min(timeout, self.left())

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.cancelled

    @property
    def cancel_reason(self) -> str:
        return (self.cancel.reason if self.cancel is not None else "") or "the guard was stopped"

    @property
    def cancel_fd(self) -> int | None:
        return self.cancel.fd if self.cancel is not None else None


UNBOUNDED = Deadline(math.inf)
_current: list[Deadline] = [UNBOUNDED]


def current() -> Deadline:
    return _current[-1]


def cap(timeout: float) -> float:
    """``timeout``, cut to what is left of the current run's deadline."""
    return current().cap(timeout)


def cancelled() -> bool:
    return current().cancelled


def nap(seconds: float) -> None:
    """Sleep ``seconds``, cut to the deadline, and ended at once by the guard's cancel."""
    bound = current()
    wait = bound.cap(seconds)
    fd = bound.cancel_fd
    if fd is None:
        time.sleep(max(0.0, wait))
    elif wait > 0 and not bound.cancelled:
        select.select([fd], [], [], wait)


@contextlib.contextmanager
def bounded(deadline: Deadline) -> Iterator[Deadline]:
    """Every wait inside ends by ``deadline`` (and an inner bound never extends an outer one)."""
    outer = current()
    if outer.at < deadline.at:
        deadline = Deadline(outer.at, deadline.cancel or outer.cancel, deadline.clock)
    elif deadline.cancel is None and outer.cancel is not None:
        deadline = Deadline(deadline.at, outer.cancel, deadline.clock)
    _current.append(deadline)
    try:
        yield deadline
    finally:
        _current.pop()

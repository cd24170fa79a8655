"""One clock for the sleep path: the deadline every wait of a guard run is cut to.

A guard run sets its deadline once (:func:`bounded`); each client that
waits on something outside the guard (D-Bus, a container engine's socket,
a child run as a user) asks :func:`cap` for its timeout instead of using its
own default alone, and stops waiting when the run is cancelled (SIGTERM to
the guard: :attr:`Deadline.cancel`). A module-level current deadline, not
one more argument through every client: the clients sit below the guard,
which is the only one that knows the run's clock, and a call made outside
any run (``status``, a test) keeps its own timeout. The guard's own stop
(:class:`Cancel`) lives here, and the shares of the deadline (the margins,
:func:`needed_s`) at the end.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace


class Cancel:
    """Set when the guard itself is told to stop (SIGTERM); wakes any poll()."""

    def __init__(self) -> None:
        self.reason = ""
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    @property
    def fd(self) -> int:
        return self._r

    @property
    def cancelled(self) -> bool:
        return bool(self.reason)

    def cancel(self, reason: str) -> None:
        self.reason = self.reason or reason
        with contextlib.suppress(OSError):
            os.write(self._w, b"x")

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


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

    def within(self, seconds: float) -> Deadline:
        """The same deadline, ending ``seconds`` from now if that comes first."""
        return replace(self, at=min(self.at, self.clock() + seconds))

    def at_least(self, seconds: float) -> Deadline:
        """The same deadline, moved to ``seconds`` from now if it ends sooner: a step that
        must still answer (the device asked once more) gets that long."""
        return replace(self, at=max(self.at, self.clock() + seconds))

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


def bounded(deadline: Deadline) -> contextlib.AbstractContextManager[Deadline]:
    """Every wait inside ends by ``deadline`` (and an inner bound never extends an outer one)."""
    return _within(deadline, extend=False)


def granted(deadline: Deadline) -> contextlib.AbstractContextManager[Deadline]:
    """Every wait inside ends by ``deadline``, even past the outer bound: a step the run
    gives more time on purpose (:meth:`Deadline.at_least`: the device asked once more after
    the run's own time is used up). The outer cancel still ends it."""
    return _within(deadline, extend=True)


@contextlib.contextmanager
def _within(deadline: Deadline, extend: bool) -> Iterator[Deadline]:
    outer = current()
    if outer.at < deadline.at and not extend:
        deadline = Deadline(outer.at, deadline.cancel or outer.cancel, deadline.clock)
    elif deadline.cancel is None and outer.cancel is not None:
        deadline = Deadline(deadline.at, outer.cancel, deadline.clock)
    _current.append(deadline)
    try:
        yield deadline
    finally:
        _current.pop()


# -- how one run's deadline is shared: the drain wait, the idle check, the answer.
# The pipeline and the configuration's check (config/load.py) read the same
# figures, so a valid configuration's drain wait is never cut short by the
# deadline in the first drain round.

# Left at the end of every run to record the verdict and answer before
# systemd's TimeoutStartSec.
ANSWER_MARGIN_S = 2.0
# The restore right after a veto: it starts once the verdict is recorded
# (by deadline_s - ANSWER_MARGIN_S) and must end inside the unit's
# TimeoutStartSec, deadline_s + 20 s (install/templates.py): a start job
# still running then is reported "starting", not waited for.
RESTORE_AFTER_VETO_S = 15.0
# The resume unit's restore (its TimeoutStartSec is 480 s, the health check first).
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
    idle = (idle_reserve_s(settle_s, command_timeout_s) + command_timeout_s
            if idle_backends else 0.0)
    return timeout_s + sum(escalate_waits) + idle + ANSWER_MARGIN_S

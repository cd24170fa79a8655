"""The tests' one way to wait for something: poll until it is true or the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 5.0, *, interval: float = 0.05,
             message: str | Callable[[], object] | None = None) -> T:
    """``predicate()``'s first true value, asked every ``interval`` seconds for ``timeout``.

    The last ask is at the end of that time; false then too, its value is
    returned, or, given a ``message``, an AssertionError with it is raised (a
    callable is called then, to say how things stand at the end).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            break
        time.sleep(interval)
    if value or message is None:
        return value
    raise AssertionError(message() if callable(message) else message)

"""What the container modules share: the booting of their container.

A module's ``box`` fixture asks ``boot`` (tests/helpers/systemd_harness.py,
Boot) for a container with its test node, its folders and its config
installed, and adds what is its own. Marks stay per module:
``pytestmark = container_marks()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from helpers.systemd_harness import Boot, unavailable_reason


@pytest.fixture(scope="module")
def boot() -> Iterator[Boot]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with contextlib.ExitStack() as stack:
        yield Boot(stack)

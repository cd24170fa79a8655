"""Restore of a transient system unit (systemd-run) that is gone after the drain: made again.

A stand-in for the supervisors answers as ManagersAndEngines does when the
unit is gone and StartTransientUnit's job still runs when its wait ends (a
``Type=notify`` job slow to come up): that is a start in progress, as for any
unit, not a failure.
"""

from __future__ import annotations

from typing import Any

import pytest

from suspendguard.config import defaults
from suspendguard.guard.restore import restore
from suspendguard.model import Owner, Unavailable
from suspendguard.record import Stop
from suspendguard.supervise.owner import UnitNow

RUN = Owner("systemd-service", "run-u7.service", transient=True)


class Gone:
    """The unit is not loaded any more; making it again answers ``made``."""

    def __init__(self, made: str | Unavailable | None) -> None:
        self.made = made

    def started_meanwhile(self, owner: Owner) -> bool:
        return False

    def remove_dropins(self, owners: Any) -> list[str]:
        return []

    def unit_now(self, owner: Owner) -> UnitNow:
        return UnitNow("not-found", "inactive", "")

    def recreate(self, owner: Owner) -> str | Unavailable | None:
        return self.made


@pytest.mark.parametrize(("made", "result"), [("active", "started"), ("starting", "starting"),
                                              ("failed", "failed"), (None, "skipped")])
def test_a_transient_unit_made_again_gets_the_result_of_its_start(made: str | None,
                                                                  result: str) -> None:
    recorded: list[tuple[str, str]] = []
    [done] = restore([Stop(RUN, 1, 1.0)], Gone(made), defaults().restore, enabled=True,  # type: ignore[arg-type]
                     record=lambda _s, r, w: recorded.append((r, w)), log=lambda _line: None,
                     warn=lambda _line: None)
    assert (done.result, recorded[0][0]) == (result, result), done.why

"""A holder in a transient user unit (systemd-run --user): named before any signal; [restore] transient.

The owner is handed to the pipeline as the supervisors read it from the
user's manager (``Transient=yes``); no user manager runs here, so a small
stand-in answers the OwnerControl protocol and records what it was asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers.holders import Holders
from helpers.runners import guard

from suspendguard.model import Holder, Owner, Unavailable
from suspendguard.record import Stop
from suspendguard.supervise.owner import UnitNow
from suspendguard.system.deadline import Deadline

ADHOC = Owner("user-service", "run-u7.service", uid=1000, restart="always", activity="active",
              transient=True)


class OneOwner:
    """Every holder runs in ADHOC; stops are recorded, nothing is restarted."""

    def __init__(self) -> None:
        self.kept: list[str] = []

    def owner(self, holder: Holder) -> Owner:
        return ADHOC

    def stop(self, owners: Sequence[Owner], signame: str, timeout_s: float = 10.0) -> dict[str, str]:
        self.kept += [o.key for o in owners]
        return {o.key: "" for o in owners}

    def settle(self, stops: Sequence[Stop], deadline: Deadline) -> list[str]:
        return []

    def started_meanwhile(self, owner: Owner) -> bool:
        return False

    def remove_dropins(self, owners: Sequence[Owner]) -> list[str]:
        return []

    def clean_leftovers(self) -> list[str]:
        return []

    def reload(self, owners: Sequence[Owner]) -> Unavailable | None:
        return None

    def unit_now(self, owner: Owner) -> UnitNow | Unavailable:
        return UnitNow("not-found", "inactive", "")

    def start(self, owner: Owner, wait: bool = True) -> str | Unavailable:
        return Unavailable("not here")

    def start_container(self, owner: Owner, stopped_at: float) -> tuple[str, str]:
        return "failed", "not here"

    def recreate(self, owner: Owner) -> str | Unavailable | None:
        return None

    def take_warnings(self) -> list[str]:
        return []


def test_vetoed_by_default_before_anyone_is_signalled(
        node: str, holders: Holders, make_config: Any) -> None:
    _, pid = holders.start(node)
    sup = OneOwner()
    report = guard(make_config(), supervisors=sup)
    assert report.verdict.kind == "veto"
    [reason] = report.verdict.texts
    assert reason.startswith(f"pid {pid} ") and "a transient unit that cannot be made again " \
        'after resume: stop it yourself, or set [restore] transient = "drain"' in reason, reason
    assert holders.signals() == [] and sup.kept == []


def test_drained_when_told_so(node: str, holders: Holders, make_config: Any) -> None:
    _, pid = holders.start(node)
    sup = OneOwner()
    report = guard(make_config(restore={"transient": "drain"}), supervisors=sup)
    assert report.verdict.kind == "allow", report.verdict
    assert f"{pid} SIGINT" in holders.signals()
    assert sup.kept == [ADHOC.key]


def test_a_timeout_names_the_user_service_whole(node: str, holders: Holders, make_config: Any) -> None:
    """The veto names the unit that keeps the job down as its manager knows it: a user
    service's name is never cut as a container's id is."""
    _, pid = holders.start(node, mode="slow")
    sup = OneOwner()
    report = guard(make_config(drain={"timeout_s": 1}, restore={"transient": "drain"}),
                   supervisors=sup)
    assert report.verdict.kind == "veto"
    [reason] = [r for r in report.verdict.texts if r.startswith(f"pid {pid} ")]
    assert "(run-u7.service, kept from restarting by the manager of uid 1000)" in reason, reason
    assert holders.signals() == [f"{pid} SIGINT"] and sup.kept == [ADHOC.key]

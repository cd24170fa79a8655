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


class UnreadUnit(OneOwner):
    """The holder's unit, its manager not answering: nothing but the note is known of it."""

    def owner(self, holder: Holder) -> Owner:
        return Owner("systemd-service", "train.service",
                     note="systemd: unavailable: calling GetAll timed out after 2 s")


def test_a_unit_whose_restart_could_not_be_read_may_restart_its_job(
        node: str, holders: Holders, make_config: Any) -> None:
    """Its Restart= unknown, the job is taken to come back as systemd's default would
    (0.1 s after it exits): the rescan waits for it, and the warning says why."""
    import subprocess
    import sys
    import textwrap

    proc, pid = holders.start(node)
    # systemd's part: once the job exits, it runs again (Restart=always). Its watch is set
    # before the guard starts ("watching"), and it waits 0.02 s, not systemd's 0.1 s: the
    # guard's grace is the same either way, and a loaded machine's scheduling delay before
    # the open must still fit in it.
    again = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, select, time
        fd = os.pidfd_open({pid})
        print("watching", flush=True)
        select.select([fd], [], [])
        time.sleep(0.02)
        node = open({node!r}, "rb")
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert again.stdout is not None and again.stdout.readline() == "watching\n"
        report = guard(make_config(drain={"rounds": 1}), supervisors=UnreadUnit())
        assert f"{pid} SIGINT" in holders.signals() and proc.wait(timeout=5) == 0
        assert report.verdict.kind == "veto", report.verdict
        assert any(f"pid {again.pid} " in r and "respawn" in r for r in report.verdict.texts), \
            report.verdict.texts
        assert any("train.service" in w and "its unit could not be read" in w
                   and "Restart= may start it again" in w for w in report.verdict.warnings), \
            report.verdict.warnings
    finally:
        again.kill()
        again.wait()

"""``status``'s verdict is the one ``check`` gives now: its dry run made as check's is.

A holder in a transient user unit (``systemd-run --user``) vetoes under the default
``[restore] transient = "veto"``: only its manager tells that the unit is transient (the
cgroup's name does not), so status asks the supervisors as check does. The holder is real,
in a cgroup named as a user manager names it; the manager is the suite's fake systemd1 on
a private bus at the manager's private socket (no user manager runs here), its unit
``Transient=yes``. A job an earlier drain signalled, still saving,
is read from the real history, as check reads it: not signalled again.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.engine.fake_engine import cgroup_root
from helpers.dbus import PrivateBus, dbus_daemon, fake_service, private_system_bus
from helpers.holders import Holders
from helpers.runners import cli

from suspendguard.commands.context import Context
from suspendguard.commands.drain import to_signal
from suspendguard.supervise import usermanager

UNIT = "run-u7.service"
NOBODY = 65534


def transient_user_manager(bus: PrivateBus) -> contextlib.AbstractContextManager[Any]:
    """The fake systemd1 on ``bus``, answering for UNIT as a transient unit, running."""
    return fake_service(bus, {"units": {UNIT: {
        "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Restart": "no",
        "Transient": True}}}, services=["systemd"])


@contextlib.contextmanager
def in_cgroup(path: str) -> Iterator[Path]:
    """A cgroup of the test's own, named ``path`` below a folder of its own; removed after
    its processes (the caller's holders, killed first)."""
    root = cgroup_root()
    if root is None or os.geteuid() != 0:
        pytest.skip("needs root and a writable cgroup v2 tree")
    base = root / f"suspendguard-test-{os.getpid()}-status"
    group = base / path
    group.mkdir(parents=True)
    try:
        yield group
    finally:
        for folder in [group, *group.parents]:
            with contextlib.suppress(OSError):
                folder.rmdir()  # the holders are killed by now: empty, deepest first
            if folder == base:
                break


def reports(conf: Path, environ: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``status --json``'s report and ``check --json``'s, through the CLI."""
    code, out, err = cli("status", "--json", "--config", str(conf), environ=environ)
    assert code == 0, err
    status = json.loads(out)
    code, out, err = cli("check", "--json", "--config", str(conf), environ=environ)
    assert code in (0, 1, 5), err
    return status, json.loads(out)


@pytest.mark.skipif(dbus_daemon() is None, reason="needs dbus-daemon")
def test_a_transient_user_unit_vetoes_in_status_as_in_check(
        conf: Path, node: str, holders: Holders, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = f"user.slice/user-{NOBODY}.slice/user@{NOBODY}.service/app.slice/{UNIT}"
    with in_cgroup(path) as group, private_system_bus("systemd/private") as bus, \
            transient_user_manager(bus):
        try:
            monkeypatch.setattr(usermanager, "runtime_dir", lambda uid: str(bus.folder))
            job, pid = holders.start(node, argv_prefix=[
                "/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs")])
            environ = {"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path / 'no-bus'}"}
            status_doc, check = reports(conf, environ)
            status = status_doc["verdict"]
            assert check["verdict"] == "veto", check
            [reason] = check["reason_details"]
            assert reason["code"] == "supervised" and reason["pid"] == pid, reason
            assert UNIT in reason["text"] and "a transient unit" in reason["text"], reason
            assert status["verdict"] == "veto", status  # what check gives now, never allow
            assert status["reason_details"] == check["reason_details"], (status, check)
            # drain's look, made as check's, lists nobody to stop: the suspend is refused.
            ctx = Context(str(conf), io.StringIO(), io.StringIO(), environ)
            assert to_signal(ctx.config(), ctx, idle_check=None) == {}
            assert holders.signals() == [] and job.poll() is None
        finally:
            holders.cleanup()


def test_a_job_an_earlier_drain_signalled_is_said_not_signalled_again_in_status_too(
        conf: Path, node: str, holders: Holders, tmp_path: Path) -> None:
    # A drain's wait ends while the job still saves (its SIGINT handler takes longer): the
    # next suspend sends it no second signal, only waits for it. status reads that from the
    # history as check does.
    conf.write_text(conf.read_text().replace("timeout_s = 5", "timeout_s = 1"))
    job, pid = holders.start(node, mode="slow")
    environ = {"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path / 'no-bus'}"}
    code, out, err = cli("drain", "--yes", "--json", "--config", str(conf), environ=environ)
    assert code == 1 and json.loads(out)["verdict"] == "veto", (out, err)
    assert holders.signals() == [f"{pid} SIGINT"] and job.poll() is None  # still saving
    status, check = reports(conf, environ)
    # Said in the holder's row: waited for, never signalled again; allowed, as a suspend
    # now would drain it (its wait) and not signal it.
    [held] = [h for h in check["holders"] if h["pid"] == pid]
    assert held["outcome"]["why"].startswith(
        "not signalled again: attempt 1 sent it SIGINT; waited for"), held
    [shown] = [h for h in status["holders"] if h["pid"] == pid]
    assert (shown["outcome"], shown["notes"]) == (held["outcome"], held["notes"]), (shown, held)
    assert status["verdict"]["verdict"] == check["verdict"], (status["verdict"], check)
    assert holders.signals() == [f"{pid} SIGINT"]  # no second signal from either look

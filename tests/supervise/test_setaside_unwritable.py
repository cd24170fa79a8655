"""What restore needs to put an owner back, when the state folder cannot keep it: the owner is
not kept down at all, as a stop the history cannot write ahead.

A restart policy set to "no", or a transient unit left to be unloaded, with nothing on disk to
undo it, would stay so after resume: the restore then is another process, which finds no
record. Here a directory lies where the file goes, so every write of it fails as on a full
disk. The container is the fake engine's (tests/fakes/engine); the transient unit the fake
systemd1's (tests/fakes/dbus), given the ``ExecStart`` property the guard reads of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fakes.engine.fake_engine import FakeEngine, cgroup_root
from helpers.dbus import FAKES, PrivateBus, dbus_daemon, fake_service, private_system_bus
from helpers.holders import Holders
from helpers.isolation import ROOT
from helpers.runners import guard

from suspendguard.model import Owner
from suspendguard.store.history import History
from suspendguard.supervise.containers import POLICIES_FILE
from suspendguard.supervise.dropin import DROPIN_NAME
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.supervise.setaside import TRANSIENT_FILE

SERVE = """
import sys
sys.path.insert(0, {fakes!r})
import fake_systemd, serve
from dbus_next.service import PropertyAccess, dbus_property

class Service(fake_systemd.Service):
    @dbus_property(access=PropertyAccess.READ)
    def ExecStart(self) -> "a(sasbttttuii)":
        return [["/usr/bin/python3", ["/usr/bin/python3", "train.py"], False,
                 0, 0, 0, 0, 0, 0, 0]]

fake_systemd.Service = Service
serve.main()
"""
RUN = Owner("systemd-service", "run-u7.service", transient=True)


@contextmanager
def systemd(tmp_path: Path) -> Iterator[PrivateBus]:
    if dbus_daemon() is None:
        pytest.skip("dbus-daemon is not installed")
    script = tmp_path / "serve_systemd.py"
    script.write_text(SERVE.format(fakes=str(FAKES)))
    units = {RUN.name: {"LoadState": "loaded", "ActiveState": "active"}}
    with private_system_bus() as bus, fake_service(bus, {"units": units}, services=["systemd"],
                                                   serve=script):
        yield bus


def unwritable(tmp_path: Path, name: str) -> Path:
    """The state folder, with a directory where the file ``name`` goes."""
    state = tmp_path / "state"
    (state / name).mkdir(parents=True)
    return state


@pytest.mark.parametrize("writable", [True, False])
def test_a_transient_unit_whose_settings_cannot_be_kept_is_not_kept_down(
        tmp_path: Path, writable: bool) -> None:
    state = tmp_path / "state" if writable else unwritable(tmp_path, TRANSIENT_FILE)
    state.mkdir(exist_ok=True)
    with systemd(tmp_path) as bus:
        control = ManagersAndEngines(dropin_root=str(tmp_path / "run"), bus_address=bus.address,
                                     environ={}, state_dir=str(state))
        answers = control.stop([RUN], "SIGINT", 5.0)
    dropin = tmp_path / "run" / f"{RUN.name}.d" / DROPIN_NAME
    if writable:  # what lets the other case fail: the fake's settings are read and kept
        assert answers == {RUN.key: ""} and dropin.exists()
        [(key, record)] = json.loads((state / TRANSIENT_FILE).read_text()).items()
        assert key == RUN.key and record["exec_start"][0][1] == ["/usr/bin/python3", "train.py"]
        return
    why = answers[RUN.key]
    assert why.startswith(f"cannot record the transient units' settings in {state / TRANSIENT_FILE}: ")
    assert why.endswith("; restore could not make it again")
    assert not dropin.exists()  # no Restart=no: its holders are signalled directly
    assert control.transient.get(RUN.key) is None
    assert control.take_warnings() == []  # said once, by the guard, with this answer


requires_engine = pytest.mark.skipif(
    not ROOT or cgroup_root() is None,
    reason="the fake engine puts its containers in cgroups: root and a writable cgroup v2 tree")


@requires_engine
def test_a_container_whose_policy_cannot_be_kept_is_not_set_aside_and_its_return_vetoes(
        tmp_path: Path, node: str, holders: Holders, make_config: Any) -> None:
    state = unwritable(tmp_path, POLICIES_FILE)
    script = ('exec 3<"$1"; trap \'echo "$$ SIGINT" >> "$2"; exit 0\' INT; echo "ready $$"; '
              'while :; do sleep 0.05 3<&-; done')
    with FakeEngine(str(tmp_path / "docker.sock")) as engine:
        c = engine.create(["/bin/sh", "-c", script, "sh", node, holders.marker], restart="always")
        supervisors = ManagersAndEngines(
            environ={"DOCKER_HOST": f"unix://{engine.socket_path}"}, state_dir=str(state))
        report = guard(make_config(drain={"rounds": 2}), supervisors=supervisors)
        updates = [p for m, p, _q, _b in engine.requests if m == "POST" and p.endswith("/update")]
        policy = c.restart
    assert updates == [], "the engine was asked to set a policy nobody could put back"
    assert policy == "always"
    [warning] = [w for w in report.verdict.warnings if "cannot record the containers' restart" in w]
    assert warning.endswith("restore could not put its policy back); the guard signals its "
                            "processes itself"), warning
    assert report.verdict.kind == "veto", report.verdict  # its policy brought it back
    with History.open(str(state)) as h:  # not kept down by the guard: no stop to restore
        assert [s for a in h.attempts() for s in a.stops] == []

"""``slurm sync``: the SuspendExcNodes file, the guard's record of its holds beside it, and
slurmctld's re-read, against a stand-in scontrol (fake_slurm)."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from helpers.fake_slurm import FakeSlurm, node
from helpers.journal import entries, standing_in
from helpers.runners import cli

from slurm.test_programs import MAINTENANCE, config_file, on_node, suspend_refused
from suspendguard.config.load import load
from suspendguard.slurm import controller
from suspendguard.slurm.controller import Controller
from suspendguard.slurm.exclusion import EXCLUDE_HEAD
from suspendguard.slurm.scontrol import Node, Scontrol
from suspendguard.system.log import Logger


@pytest.mark.parametrize(("earlier", "health"), [("", "resume"), (MAINTENANCE, "leave")])
def test_a_held_node_whose_reason_slurm_dropped_at_its_registration_stays_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, earlier: str, health: str) -> None:
    # Held while its slurmd did not register; it does later, at a reconfigure another sync
    # asked, and slurmctld frees the reason of a POWERED_DOWN node, the DRAIN kept. The
    # guard's record of its holds keeps the node held: the sync gives the reason back and
    # keeps the node out of power saving, and the node's health check lifts the guard's own
    # drain (an admin's stays theirs).
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN", "POWERING_DOWN") if earlier
                                              else ("POWERING_DOWN",), earlier)})
    held, _ = suspend_refused(tmp_path, monkeypatch, fake)
    assert "suspendguard: sigint-ignored: pid 7 ignores SIGINT" in held
    fake.register("node1")
    assert fake.node("node1") == node(("DRAIN",))
    config = tmp_path / "config.toml"
    status, _, err = cli("--config", str(config), "slurm", "sync")
    assert status == 0, err
    assert fake.node("node1") == node(("DRAIN",), held)
    assert f"node1: its reason, dropped by Slurm, given again: {held}" in err
    exclude = tmp_path / "exclude.conf"
    assert exclude.read_text().endswith("SuspendExcNodes=node1\n")
    assert cli("--config", str(on_node(tmp_path)), "slurm", "health")[:2] == (
        0, f"node1: {health}: accelerator free and healthy\n")
    if health == "leave":
        return
    assert fake.node("node1") == node()
    assert cli("--config", str(config), "slurm", "sync")[0] == 0
    assert exclude.read_text() == EXCLUDE_HEAD
    # Lifted, the node is no longer the guard's: a drain of somebody else's that loses its
    # reason later is left as it is.
    doc = fake.read()
    doc["nodes"]["node1"] = node(("DRAIN",))
    fake.write(doc)
    assert cli("--config", str(config), "slurm", "sync")[0] == 0
    assert fake.node("node1") == node(("DRAIN",))
    assert exclude.read_text() == EXCLUDE_HEAD


@pytest.mark.parametrize("failing", ["show", "reconfigure"])
def test_a_sync_that_failed_exits_3(tmp_path: Path, failing: str) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN",), "suspendguard: sigint-ignored: pid 7")})
    fake.fail(failing, "slurm_load_node error: Unable to contact slurm controller")
    status, _, err = cli("--config", str(config_file(tmp_path, fake, "veto")), "slurm", "sync")
    assert status == 3, err
    assert "Unable to contact slurm controller" in err


def test_a_hold_whose_sync_failed_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Held, but missing from SuspendExcNodes: Slurm powers it down again at the next cycle.
    monkeypatch.setattr(controller, "REGISTER_S", 0.1)
    monkeypatch.setattr(controller, "SCONTROL_PAUSE_S", 0.0)
    fake = FakeSlurm(tmp_path, {"node1": node(("POWERING_DOWN",))})
    fake.fail("reconfigure", "slurm_reconfigure error: Unable to contact slurm controller")
    status, _, err = cli("--config", str(config_file(tmp_path, fake, "veto")), "slurm",
                         "suspend", "node1")
    assert status == 3, err
    assert "DRAIN" in fake.node("node1")["flags"]
    assert "Unable to contact slurm controller" in err


def test_a_sync_that_found_nothing_to_change_exits_0(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node()})
    path = config_file(tmp_path, fake, "veto")
    assert cli("--config", str(path), "slurm", "sync")[0] == 0
    assert cli("--config", str(path), "slurm", "sync")[0] == 0
    assert fake.calls().count(["reconfigure"]) == 1


def test_an_exclusion_file_edited_in_another_encoding_is_written_over(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path, {"node1": node()})
    path = config_file(tmp_path, fake, "veto")
    (tmp_path / "exclude.conf").write_bytes(b"# M\xfcller: keep node7 up\nSuspendExcNodes=node7\n")
    status, _, err = cli("--config", str(path), "slurm", "sync")
    assert status == 0, err
    assert (tmp_path / "exclude.conf").read_text() == EXCLUDE_HEAD
    assert fake.calls().count(["reconfigure"]) == 1


def test_two_syncs_at_once_lose_neither_held_node(tmp_path: Path) -> None:
    # Two SuspendPrograms, or one and the timer's sync: each lists the drained nodes,
    # then writes the file. A listing taken before the other's drain must not be
    # written over the file that names the node drained meanwhile.
    held = "suspendguard: sigint-ignored: pid 7 ignores SIGINT"
    fake = FakeSlurm(tmp_path, {"nodeA": node(("DRAIN",), held), "nodeB": node()})
    config = load(str(config_file(tmp_path, fake, "veto")), {}).slurm
    second = Controller(config, Logger(io.StringIO(), {}), local="ctl")
    other = threading.Thread(target=second.sync, kwargs={"also": ("nodeB",)})

    class Slow(Scontrol):
        def nodes(self, name: str | None = None) -> list[Node]:
            seen = super().nodes(name)  # nodeB not drained yet
            doc = fake.read()
            doc["nodes"]["nodeB"] = node(("DRAIN",), held)
            fake.write(doc)
            other.start()  # the second drains nodeB and syncs while this one lists
            other.join(timeout=2)
            return seen

    class First(Controller):
        @property
        def scontrol(self) -> Scontrol:
            return Slow(self.config.scontrol)

    First(config, Logger(io.StringIO(), {}), local="ctl").sync(also=("nodeA",))
    other.join()
    assert (tmp_path / "exclude.conf").read_text().endswith("SuspendExcNodes=nodeA,nodeB\n")


def test_a_re_read_that_failed_is_asked_again_at_the_next_sync(tmp_path: Path) -> None:
    # The file was written but slurmctld did not re-read it: the next sync finds the
    # file as it should be, and must still have slurmctld read it.
    held = "suspendguard: sigint-ignored: pid 7 ignores SIGINT"
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN",), held)})
    path = config_file(tmp_path, fake, "veto")
    fake.fail("reconfigure", "slurm_reconfigure error: Socket timed out on send/recv operation")
    assert cli("--config", str(path), "slurm", "sync")[0] == 3
    fake.heal("reconfigure")
    assert cli("--config", str(path), "slurm", "sync")[0] == 0
    assert fake.calls().count(["reconfigure"]) == 2
    assert cli("--config", str(path), "slurm", "sync")[0] == 0
    assert fake.calls().count(["reconfigure"]) == 2  # read once it succeeded
    assert sorted(p.name for p in tmp_path.iterdir() if "exclude" in p.name) == \
        ["exclude.conf", "exclude.conf.held", "exclude.conf.lock"]


def test_under_systemd_a_failure_is_one_line_in_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # suspendguard-slurm-sync.service: stderr is the journal (JOURNAL_STREAM), so the
    # line is not sent a second time through journald's socket.
    fake = FakeSlurm(tmp_path, {"node1": node()})
    fake.fail("show", "slurm_load_node error: Unable to contact slurm controller")
    path = config_file(tmp_path, fake, "veto")
    with standing_in(tmp_path, monkeypatch) as journal:
        status, _, err = cli("--config", str(path), "slurm", "sync",
                             environ={"JOURNAL_STREAM": "8:12345"})
        said = entries(journal)
    assert status == 3
    assert err.count("\n") == 1 and err.startswith("<3>the drained nodes could not be listed")
    assert said == []


def test_the_sets_with_a_count_go_first_so_no_name_joins_one(tmp_path: Path) -> None:
    # Slurm takes a count for every name since the count before it: "login1,n[1-4]:2,node1"
    # would keep two of login1, n1-n4 up, and power down login1 or the held node1.
    held = "suspendguard: sigint-ignored: pid 7 ignores SIGINT"
    fake = FakeSlurm(tmp_path, {"node1": node(("DRAIN",), held)})
    path = config_file(tmp_path, fake, "veto")
    path.write_text(path.read_text() + 'exclude = ["login1", "n[1-4]:2,gpu[1-3]", "nid[1-9]:1"]\n')
    status, _, err = cli("--config", str(path), "slurm", "sync")
    assert status == 0, err
    assert (tmp_path / "exclude.conf").read_text().endswith(
        "SuspendExcNodes=n[1-4]:2,nid[1-9]:1,login1,gpu[1-3],node1\n")

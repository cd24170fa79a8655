"""scontrol's node lines read back: states, flags and a reason with spaces and its stamp cut."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suspendguard.config.cluster import exclude_problem
from suspendguard.slurm.exclusion import EXCLUDE_HEAD, exclusion_lock, write_if_changed
from suspendguard.slurm.node import _health_action
from suspendguard.slurm.scontrol import HostlistError, Scontrol, SlurmError, parse_nodes
from suspendguard.verdict import Reason

HELD = Reason("held-outside-slurm", "pid 9 python3 holds /dev/davinci0, outside Slurm")


def test_states_flags_and_reasons_are_read_from_show_node_lines() -> None:
    text = (
        "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN+POWERED_DOWN "
        "ThreadsPerCore=1 Partitions=main BootTime=2026-12-03T10:50:10 "
        "Reason=suspendguard: sigint-ignored: pid 12 x=y [slurm@2026-12-03T17:32:37]\n"
        "NodeName=node2 Arch=x86_64 State=MIXED Partitions=main Reason=(null)\n"
        "NodeName=node3 State=DOWN*+NOT_RESPONDING Reason=Not responding [slurm@2026-12-03T17:40:00]\n"
    )
    n1, n2, n3 = parse_nodes(text)
    assert (n1.name, n1.state, n1.flags) == ("node1", "IDLE", {"DRAIN", "POWERED_DOWN"})
    assert n1.reason == "suspendguard: sigint-ignored: pid 12 x=y"
    assert n1.drained and n1.asleep
    assert (n2.state, n2.reason, n2.drained, n2.asleep) == ("MIXED", "", False, False)
    assert (n3.state, n3.flags, n3.reason) == ("DOWN", {"NOT_RESPONDING"}, "Not responding")


@pytest.mark.parametrize(("drained", "reason", "problems", "action"), [
    (False, "", [HELD], "drain"),
    (True, "suspendguard: sigint-ignored: pid 9", [HELD], "keep"),  # its first reason stays
    (True, "suspendguard: held-outside-slurm: pid 9", [], "resume"),
    (True, "maintenance", [], "leave"),  # somebody else's drain
    (True, "NHC: check_fs_mount failed", [HELD], "leave"),
    (False, "", [], "leave"),
    # A drain whose reason Slurm 22.05 dropped (a power-save wake, a powered-down node's
    # registration): nobody's the guard knows, so never taken for its own, nor lifted.
    (True, "", [HELD], "leave"),
    (True, "", [], "leave"),
])
def test_health_drains_keeps_resumes_or_leaves_alone(drained: bool, reason: str,
                                                     problems: list[Reason], action: str) -> None:
    assert _health_action(drained, reason, problems) == action


@pytest.mark.parametrize(("drained", "reason", "action"), [
    (True, "suspendguard: unhealthy-after-resume: device npu 0", "keep"),  # not lifted
    (False, "", "leave"),  # not drained for what it cannot know
    (True, "maintenance", "leave"),
])
def test_health_unknown_neither_drains_nor_lifts_the_guards_drain(drained: bool, reason: str,
                                                                  action: str) -> None:
    assert _health_action(drained, reason, [], unknown=True) == action


def test_the_exclusion_file_is_rewritten_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "suspendguard-exclude.conf"
    text = EXCLUDE_HEAD + "SuspendExcNodes=node1\n"
    with exclusion_lock(path):
        assert write_if_changed(path, text)
        assert path.read_text() == text
        inode = path.stat().st_ino
        assert not write_if_changed(path, text)
        assert path.stat().st_ino == inode
        assert write_if_changed(path, EXCLUDE_HEAD)
    assert path.read_text() == EXCLUDE_HEAD and path.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".lock"]


def test_an_exclusion_file_edited_in_another_encoding_is_rewritten(tmp_path: Path) -> None:
    # An admin's Latin-1 comment: the file is the guard's, so it is a change like any
    # edit, written over, never a decode error that stops every hold and sync.
    path = tmp_path / "suspendguard-exclude.conf"
    path.write_bytes(EXCLUDE_HEAD.encode() + b"# M\xfcller\n")
    text = EXCLUDE_HEAD + "SuspendExcNodes=node1\n"
    with exclusion_lock(path):
        assert write_if_changed(path, text)
    assert path.read_bytes() == text.encode()


def test_a_reason_ends_at_its_stamp_when_a_comment_or_reservation_follows() -> None:
    # Slurm prints Comment=, Extra=, InstanceId=, InstanceType= and ReservationName=
    # after the reason's stamp (src/api/node_info.c); a held node's reason is built
    # on the one read here, so none of them may be taken into it.
    text = (
        "NodeName=node1 State=IDLE+DRAIN CurrentWatts=n/a AveWatts=n/a "
        "Reason=maintenance window [root@2026-12-03T17:32:37] Comment=RMA 4711 Extra=rack=4\n"
        "NodeName=node2 State=IDLE+DRAIN Reason=disk swap ReservationName=maint\n"
        "NodeName=node3 State=IDLE+DRAIN Reason=set Extra=1 by hand [root@2026-12-03T17:32:37]\n"
    )
    n1, n2, n3 = parse_nodes(text)
    assert n1.reason == "maintenance window" and n1.drained
    assert n2.reason == "disk swap"
    # The stamp ends a reason first, whatever its own words look like.
    assert n3.reason == "set Extra=1 by hand"


def test_a_multi_line_reason_is_read_on_one_line_without_its_stamp() -> None:
    # In one-liner mode Slurm 22.05 prints a reason's further lines after its stamp, each
    # after eight spaces (src/api/node_info.c: line_end, then seven spaces). A held node's
    # reason is built on the one read here: the stamp must never get into it.
    text = (
        "NodeName=node1 State=IDLE+DRAIN CurrentWatts=n/a AveWatts=n/a "
        "Reason=PSU swap [root@2026-12-03T17:32:37]        ticket 4411        rack=4\n"
        "NodeName=node2 State=IDLE+DRAIN Reason=disk swap [root@2026-12-03T17:32:37]"
        "        see RMA Comment=RMA 4711 Extra=1\n"
    )
    n1, n2 = parse_nodes(text)
    assert n1.reason == "PSU swap ticket 4411 rack=4"
    assert n2.reason == "disk swap see RMA" and n2.drained


def test_a_hostlist_is_expanded_as_slurm_expands_it(real_scontrol: Scontrol) -> None:
    assert real_scontrol.hostnames("node[01-03,07],gpu5") == [
        "node01", "node02", "node03", "node07", "gpu5"]


@pytest.mark.parametrize(("hostlist", "said"), [
    ("n[1-2]-ib", "Invalid hostlist: n[1-2]-ib"),  # scontrol exits 0, expands nothing
    ("n[1-2", "not a hostlist"),  # scontrol exits 0 with "n]"
])
def test_a_hostlist_scontrol_cannot_read_is_an_error_though_it_exits_0(
        real_scontrol: Scontrol, hostlist: str, said: str) -> None:
    with pytest.raises(SlurmError, match=re.escape(f"scontrol show hostnames {hostlist}: {said}")):
        real_scontrol.hostnames(hostlist)


@pytest.mark.parametrize("hostlist", ["n[3-1]", "n[1--2]", "n[,]", "n[1,,2]", "n[-1]",
                                      "n[0-65536]", "n[1-]", "n[0-65535]", "a[1-2]b[3-4]",
                                      "n[01-04,07],gpu5", "[1-2]", "n[1-2].ib", "n[1-2]a",
                                      "n[1-2].ib[1]", "a[1-2]b[3-4]c", "x.ib,n[1-2]",
                                      "n[1-2],m[3]a:1", "n[1-2]-"])
def test_the_ranges_refused_are_those_slurm_refuses(real_scontrol: Scontrol,
                                                    hostlist: str) -> None:
    # Slurm's own hostlist reader (scontrol's is slurmctld's): what it cannot read in
    # SuspendExcNodes has it ignore the line.
    try:
        real_scontrol.hostnames(hostlist)
        slurm_reads = True
    except HostlistError:
        slurm_reads = False
    assert (exclude_problem(hostlist) is None) == slurm_reads

"""The holder scan on real processes: fds, mappings, namespaces, SIGINT disposition."""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES
from helpers.holders import HOLDER, Holders
from helpers.isolation import ROOT, needs_root
from helpers.runners import guard
from helpers.wait import wait_for

from suspendguard.config import DevicesConfig
from suspendguard.guard import scan
from suspendguard.guard.describe import describe_process, log_dirs
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Inventory
from suspendguard.system.cgroup_path import unit_and_container
from suspendguard.system.io_uring import registered_files, unlisted
from suspendguard.system.procfs import ProcFS, parse_cgroup, parse_hidepid, parse_status


def inventory(node: str, management: tuple[str, ...] = ()) -> Inventory:
    return take_inventory(DevicesConfig((), (node,), management))


def test_inventory_identity_and_missing_glob(node: str) -> None:
    inv = take_inventory(DevicesConfig((), (node, "/nonexistent/npu*"), ()))
    assert [n.path for n in inv.nodes] == [node]
    n = inv.nodes[0]
    assert n.role == "compute"
    if ROOT:
        assert n.key == ("char", os.makedev(1, 7)) and n.identity == "char 1:7"
    else:
        assert n.key[0] == "file"
    assert any("/nonexistent/npu* matched nothing" in note for note in inv.notes)


def test_fd_holder_found_with_details(node: str, holders: Holders) -> None:
    _, pid = holders.start(node)
    result = scan_holders(inventory(node))
    found = {h.pid: h for h in result.holders}
    assert pid in found
    h = found[pid]
    assert h.sigint == "caught"  # Python installs its KeyboardInterrupt handler
    assert h.nodes[0].via == "fd" and h.nodes[0].node.path == node
    assert h.cmdline[1] == HOLDER
    assert h.user and h.start_time > 0 and h.nspid[-1] == pid
    assert os.getpid() not in found


def test_deaf_holder_is_reported_ignored(node: str, holders: Holders) -> None:
    _, pid = holders.start(node, mode="deaf")
    h = next(h for h in scan_holders(inventory(node)).holders if h.pid == pid)
    assert h.sigint == "ignored"


def test_background_job_of_a_script_inherits_sig_ign(node: str, holders: Holders) -> None:
    # `cmd &` in a non-interactive shell sets SIGINT to SIG_IGN for the job;
    # Python then never installs its KeyboardInterrupt handler.
    _, pid = holders.start(node, mode="inherit", argv_prefix=["sh", "-c", '"$@" & wait', "sh"])
    h = next(h for h in scan_holders(inventory(node)).holders if h.pid == pid)
    assert h.sigint == "ignored"


def test_mapping_only_holder(tmp_path: Path, holders: Holders) -> None:
    if ROOT:
        path = tmp_path / "zero0"
        os.mknod(path, 0o666 | 0o020000, os.makedev(1, 5))  # /dev/zero can be mapped
    else:
        path = tmp_path / "stand-in"
        path.write_bytes(b"\0" * 4096)
    _, pid = holders.start(str(path), mode="map")
    h = next(h for h in scan_holders(inventory(str(path))).holders if h.pid == pid)
    assert [hn.via for hn in h.nodes] == ["map"]


def test_a_file_named_after_a_nodes_device_and_inode_holds_nothing(
        tmp_path: Path, node: str, holders: Holders) -> None:
    # The node's dev:inode is anyone's to read (stat); a file whose name carries it, mapped,
    # must not make its mapper a holder, or any user could veto every suspend.
    st = os.stat(node)
    decoy = tmp_path / f"decoy {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x} {st.st_ino} x"
    decoy.write_bytes(b"\0" * 4096)
    _, pid = holders.start(str(decoy), mode="map")
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert f" {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x} {st.st_ino} " in maps
    assert [h.pid for h in scan_holders(inventory(node)).holders if h.pid == pid] == []


@needs_root
def test_a_node_registered_with_an_io_uring_alone_is_held(tmp_path: Path,
                                                          holders: Holders) -> None:
    # The job's own fd is closed: neither fd/ nor maps shows the node, the ring's fdinfo does.
    # A space in the path: fdinfo writes it escaped (\040).
    path = tmp_path / "npu 0"
    os.mknod(path, 0o666 | 0o020000, os.makedev(1, 7))
    _, pid = holders.start(str(path), mode="io_uring")
    links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    assert str(path) not in links and "anon_inode:[io_uring]" in links
    h = next(h for h in scan_holders(inventory(str(path))).holders if h.pid == pid)
    assert [(hn.via, hn.seen_as, hn.node.path) for hn in h.nodes] == [
        ("io_uring", str(path), str(path))]


def test_an_o_path_fd_on_a_node_holds_nothing(node: str, holders: Holders) -> None:
    # The driver never saw an open: the process is no holder, and nothing signals it.
    _, named = holders.start(node, mode="o_path")
    _, opened = holders.start(node)
    links = [os.readlink(f"/proc/{named}/fd/{fd}") for fd in os.listdir(f"/proc/{named}/fd")]
    assert node in links  # the fd is there, naming the node
    found = [h.pid for h in scan_holders(inventory(node)).holders]
    assert opened in found and named not in found


def test_registered_files_are_read_from_a_rings_fdinfo() -> None:
    fdinfo = (b"SqMask:\t0x3\nUserFiles:\t4\n    0: /dev/davinci0\n    1: <none>\n"
              b"    2: /tmp/npu\\0400\n   10: /dev/back\\134slash\nUserBufs:\t0\nPollList:\n")
    assert registered_files(fdinfo) == ["/dev/davinci0", "/tmp/npu 0", "/dev/back\\slash"]
    assert registered_files(b"SqMask:\t0x3\nUserFiles:\t0\nUserBufs:\t0\n") == []
    assert registered_files(b"pos:\t0\nflags:\t02\n") == []  # not a ring
    assert not unlisted(fdinfo)
    # From 6.14 an empty slot is left out where paths are listed; from 6.15 a ring whose lock
    # is taken shows nothing of itself: no count at all.
    assert not unlisted(b"UserFiles:\t4\n    2: /dev/davinci0\nUserBufs:\t0\n")
    assert unlisted(b"pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2071\n")
    # A count with no slot listed: before 6.15 the ring's lock was taken (the list left out);
    # from 6.15 that ring shows no count, and this is a sparse table with nothing in it yet.
    assert unlisted(b"UserFiles:\t1\nUserBufs:\t0\n", "6.14.0")
    assert not unlisted(b"UserFiles:\t1\nUserBufs:\t0\n", "6.15.0")


# Before Linux 6.14 (Ubuntu 22.04's 5.15, openEuler's 5.10 and 6.6): the dentry's own name
# alone (file_dentry(f)->d_iname), and no list at all while the ring's lock is taken.
OLD_RELEASE = "5.15.0-91-generic"
OLD_RING = b"SqThread:\t-1\nSqThreadCpu:\t-1\nUserFiles:\t2\n    0: npu0\n    1: <none>\nUserBufs:\t0\n"
BUSY_RING = b"SqThread:\t4242\nSqThreadCpu:\t3\nUserFiles:\t2\nUserBufs:\t0\nPollList:\n"


def test_a_ring_of_an_older_kernel_names_its_files_by_their_last_name() -> None:
    assert registered_files(OLD_RING) == ["npu0"] and not unlisted(OLD_RING)
    assert registered_files(BUSY_RING) == [] and unlisted(BUSY_RING, OLD_RELEASE)


@pytest.mark.parametrize("fdinfo", [OLD_RING, BUSY_RING], ids=["named", "unlisted"])
def test_a_ring_of_an_older_kernel_is_a_holder_or_unread_never_nothing(
        tmp_path: Path, node: str, holders: Holders, fdinfo: bytes) -> None:
    # A fake /proc as such a kernel shows it: a job whose one hold on the node is a ring.
    _, pid = holders.start(node)
    fake = tmp_path / "proc"
    real = Path("/proc") / str(pid)
    (fake / str(pid) / "fd").mkdir(parents=True)
    (fake / str(pid) / "fdinfo").mkdir()
    os.symlink("anon_inode:[io_uring]", fake / str(pid) / "fd" / "5")
    (fake / str(pid) / "fdinfo" / "5").write_bytes(fdinfo)
    for name in ("stat", "status", "cmdline", "cgroup"):
        (fake / str(pid) / name).write_bytes((real / name).read_bytes())
    (fake / "sys/kernel").mkdir(parents=True)
    (fake / "sys/kernel/osrelease").write_text(OLD_RELEASE + "\n")
    result = scan_holders(inventory(node), ProcFS(str(fake)))
    if fdinfo is OLD_RING:
        [held] = result.holders
        assert held.pid == pid and [(n.node.path, n.via) for n in held.nodes] == [
            (node, "io_uring")]
    else:  # its files unlisted: it may hold the node, which the guard cannot tell
        assert result.holders == () and result.unreadable_pids == (pid,)


def test_management_only_holder_is_scanned_with_its_role(tmp_path: Path, holders: Holders) -> None:
    mgmt = tmp_path / "manager"
    mgmt.write_bytes(b"")
    compute = tmp_path / "compute"
    compute.write_bytes(b"")
    _, pid = holders.start(str(mgmt))
    inv = take_inventory(DevicesConfig((), (str(compute),), (str(mgmt),)))
    h = next(h for h in scan_holders(inv).holders if h.pid == pid)
    assert h.roles == frozenset({"management"})


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare not installed")
def test_container_node_under_another_name_found_by_rdev(node: str, holders: Holders) -> None:
    script = (
        "mount -t tmpfs none /dev && mknod /dev/davinci_manager c 1 7 && "
        f'exec "$0" {HOLDER} --node /dev/davinci_manager --marker {holders.marker}'
    )
    _, pid = holders.start(node, argv_prefix=["unshare", "-m", "--propagation", "private",
                                               "sh", "-c", script, sys.executable, "--"])
    # (holders.start appended its own argv after ours; the script ignores them)
    h = next(h for h in scan_holders(inventory(node)).holders if h.pid == pid)
    assert h.nodes[0].seen_as == "/dev/davinci_manager"
    assert h.nodes[0].node.path == node


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare not installed")
def test_a_containers_own_node_registered_with_an_io_uring_is_found_by_rdev(
        node: str, holders: Holders) -> None:
    # The ring's fdinfo names the file as the container sees it: read through its root.
    script = (
        "mount -t tmpfs none /dev && mknod /dev/davinci_manager c 1 7 && "
        f'exec "$0" {HOLDER} --node /dev/davinci_manager --mode io_uring '
        f"--marker {holders.marker}"
    )
    _, pid = holders.start(node, argv_prefix=["unshare", "-m", "--propagation", "private",
                                               "sh", "-c", script, sys.executable, "--"])
    h = next(h for h in scan_holders(inventory(node)).holders if h.pid == pid)
    assert [(n.via, n.seen_as, n.node.path) for n in h.nodes] == [
        ("io_uring", "/dev/davinci_manager", node)]


@needs_root
def test_a_node_on_a_mount_gone_from_view_is_found_through_its_fd(
        tmp_path: Path, node: str, holders: Holders) -> None:
    # umount -l: the job keeps its fd, whose path the guard, in the same mount namespace,
    # can no longer reach (the suite's own private one: the host's mounts are untouched).
    where = tmp_path / "mnt"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(where)], check=True)
    try:
        other = where / "npu0"
        os.mknod(other, 0o666 | stat.S_IFCHR, os.stat(node).st_rdev)  # the device, named apart
        _, pid = holders.start(str(other))
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
    assert not other.exists()
    found = {h.pid: h for h in scan_holders(inventory(node)).holders}
    assert pid in found and found[pid].nodes[0].via == "fd"


def test_unreadable_and_vanishing_entries_do_not_abort(tmp_path: Path, node: str,
                                                       holders: Holders) -> None:
    _, pid = holders.start(node)
    # A fake /proc: one real-looking holder, one process that vanished (no
    # files), one whose fd folder refuses access.
    fake = tmp_path / "proc"
    real = Path("/proc") / str(pid)
    (fake / str(pid) / "fd").mkdir(parents=True)
    os.symlink(node, fake / str(pid) / "fd" / "3")
    for name in ("stat", "status", "cmdline", "cgroup"):
        (fake / str(pid) / name).write_bytes((real / name).read_bytes())
    (fake / "99998").mkdir()
    locked = fake / "99999" / "fd"
    locked.mkdir(parents=True)
    if not ROOT:
        locked.chmod(0)
    result = scan_holders(inventory(node), ProcFS(str(fake)))
    assert [h.pid for h in result.holders] == [pid]
    if not ROOT:
        assert result.unreadable == 1


def test_an_fd_table_not_read_for_want_of_fds_is_not_an_empty_one() -> None:
    # EMFILE, ENOMEM: the table may hold a node; "no fds" would let the suspend go on.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    filler: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 8, hard))
    try:
        with pytest.raises(OSError) as failed:
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        assert failed.value.errno == errno.EMFILE
        with pytest.raises(OSError) as failed:
            ProcFS().open_paths(os.getpid())
        assert failed.value.errno == errno.EMFILE
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


DEEP = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(20):  # 20 * 251 characters: past PATH_MAX, as any user may make it
    os.mkdir("d" * 250, dir_fd=fd)
    deeper = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = deeper
held = os.open("f", os.O_CREAT | os.O_RDWR, 0o600, dir_fd=fd)
print("ready", flush=True)
time.sleep(60)
"""


def test_an_fd_whose_path_is_past_path_max_is_no_error(tmp_path: Path, node: str,
                                                      holders: Holders) -> None:
    # readlink says ENAMETOOLONG: an answer about that fd (no node's), not the guard's want
    # of fds; raised, it failed every look, and so every suspend, while the process ran.
    deep = subprocess.Popen([sys.executable, "-c", DEEP, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    holders.procs.append(deep)
    assert deep.stdout is not None and deep.stdout.readline().strip() == "ready"
    _, pid = holders.start(node)
    found = [h.pid for h in scan_holders(inventory(node)).holders]
    assert pid in found and deep.pid not in found


def test_a_mapping_gone_mid_scan_does_not_hide_the_same_node_in_the_next_process(
        tmp_path: Path, node: str) -> None:
    # Two processes map a node under a container's own name (no fd left). The first one's
    # mapping goes away as it is read (its map_files entry is gone): that answer was kept
    # for the node's dev:ino, and the second process, which still maps it, was no holder.
    fake = tmp_path / "proc"
    span = "7f0000000000-7f0000001000"
    for pid in (101, 102):
        (fake / str(pid) / "fd").mkdir(parents=True)
        (fake / str(pid) / "map_files").mkdir()
        (fake / str(pid) / "maps").write_text(f"{span} rw-s 00000000 00:05 999 /dev/npu_ct\n")
        (fake / str(pid) / "stat").write_bytes(Path("/proc/self/stat").read_bytes())
    os.symlink(node, fake / "102" / "map_files" / span)
    scanner = scan._Scanner(inventory(node), ProcFS(str(fake)))
    found, unreadable, _ = scan._held_in(scanner, [101, 102], frozenset())
    assert list(found) == [102] and unreadable == []
    assert [(h.node.path, h.via) for h in found[102][1]] == [(node, "map")]


def test_a_kernel_thread_is_never_described_as_a_holder(tmp_path: Path) -> None:
    # A device's pid from another PID namespace may name one here (kthreadd is pid 2).
    fake = tmp_path / "proc" / "2"
    fake.mkdir(parents=True)
    (fake / "stat").write_text("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 "
                               "2 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 "
                               "0 0 0 0 0 0 0 0 0 0 0 0 0\n")
    status = "Name:\tkthreadd\nUid:\t0\t0\t0\t0\nNSpid:\t2\nKthread:\t{}\nSigBlk:\t0\n" \
             "SigIgn:\tffffffffffffffff\nSigCgt:\t0\n"
    proc = ProcFS(str(tmp_path / "proc"))
    (fake / "status").write_text(status.format(1))
    assert describe_process(2, [], proc, source="npu-smi") is None
    (fake / "status").write_text(status.format(0))  # a kernel before Kthread: was shown
    assert describe_process(2, [], proc, source="npu-smi") is None  # PF_KTHREAD in its flags
    # A namespace's own pid 2 (tools/test runs the suite as one), its flags without it.
    (fake / "stat").write_text((fake / "stat").read_text().replace(" 2129984 ", " 4194560 "))
    assert describe_process(2, [], proc, source="npu-smi") is not None


def test_pid1_refusal_is_counted_not_fatal(node: str) -> None:
    result = scan_holders(inventory(node))
    try:
        os.listdir("/proc/1/fd")
    except PermissionError:
        assert 1 in result.unreadable_pids
    assert result.scanned > 0


# /proc/PID/status as Linux 5.15 (Ubuntu 22.04) writes it, with no Kthread: line, of a
# process that named itself (prctl PR_SET_NAME) "job\x1cKthread:1": the kernel escapes
# "\n", "\t" and the like in Name:, never \x1c (checked here with a real process below).
STATUS_5_15 = ("Name:\tjob\x1cKthread:1\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n"
               "Ngid:\t0\nPid:\t4242\nPPid:\t1\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\n"
               "Gid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t1000 \nNStgid:\t4242\n"
               "NSpid:\t4242\nNSpgid:\t4242\nNSsid:\t4242\nSigQ:\t0/63432\n"
               "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n"
               "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
               "SigCgt:\t0000000000000002\n")


def test_a_process_cannot_name_itself_a_kernel_thread() -> None:
    """A kernel thread is never a holder: a user's job that could pass for one would be
    skipped by the scan, and the suspend go ahead under it."""
    st = parse_status(STATUS_5_15)
    assert not st.kthread and st.uid == 1000
    named = subprocess.Popen([sys.executable, "-c",
                              "import ctypes, sys; ctypes.CDLL(None).prctl(15, b'job\\x1cKthread:1', "
                              "0, 0, 0); print(flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert named.stdout is not None and named.stdout.readline() == "\n"
        text = Path(f"/proc/{named.pid}/status").read_text()
        assert text.startswith("Name:\tjob\x1cKthread:1\n"), text[:40]  # as the kernel wrote it
    finally:
        named.communicate("")


def test_status_and_cgroup_parsers() -> None:
    st = parse_status("Uid:\t0\t0\t0\t0\nSigBlk:\t0000000000000000\n"
                      "SigIgn:\t0000000001001006\nSigCgt:\t0000000180000000\nNSpid:\t432\t7\n")
    assert st.masks.disposition(signal.SIGINT) == "ignored" and st.nspid == (432, 7)
    assert (st.gid, st.groups) == (-1, ())  # no Gid line: unknown, never root's 0
    ids = parse_status("Uid:\t1000\t1000\t1000\t1000\nGid:\t27\t27\t27\t27\nGroups:\t4 24 100 \n")
    assert (ids.uid, ids.gid, ids.groups) == (1000, 27, (4, 24, 100))
    me = ProcFS().status(os.getpid())
    assert me is not None and (me.gid, set(me.groups)) == (os.getgid(), set(os.getgroups()))
    own = ProcFS().stat(os.getpid())
    assert own is not None and (own.ppid, own.pgrp) == (os.getppid(), os.getpgrp())
    assert parse_cgroup("0::/system.slice/docker-0123456789abcdef0123.scope\n") == \
        "/system.slice/docker-0123456789abcdef0123.scope"
    assert unit_and_container("/system.slice/docker-0123456789abcdef0123.scope") == \
        ("docker-0123456789abcdef0123.scope", "docker:0123456789ab")
    assert unit_and_container("/user.slice/user-0.slice/session-3.scope") == ("session-3.scope", None)
    assert unit_and_container("/system.slice/train.service") == ("train.service", None)


def test_hidepid_is_read_from_the_last_proc_mount_on_its_path() -> None:
    # As a private mount namespace's mountinfo reads after
    # `mount -t proc -o hidepid=2,gid=27 proc /proc` (Linux 6.1).
    text = ("48 46 0:21 / /proc rw,relatime - proc proc rw\n"
            "66 48 0:40 / /proc rw,relatime - proc proc rw,gid=27,hidepid=invisible\n"
            "70 48 0:41 / /run/my\\040proc rw - proc proc rw,hidepid=2\n")
    assert parse_hidepid(text, "/proc", {0}) == "invisible"
    assert parse_hidepid(text, "/proc", {27}) == ""  # the gid= group sees every process
    assert parse_hidepid(text, "/run/my proc", set()) == "2"
    assert parse_hidepid(text.splitlines()[0], "/proc", set()) == ""
    # hidepid=noaccess lists the folders (each then refuses its reads): nothing is hidden.
    assert parse_hidepid("1 0 0:5 / /proc rw - proc proc rw,hidepid=noaccess\n", "/proc",
                         set()) == ""
    assert parse_hidepid("1 0 0:5 / /proc rw - sysfs sysfs rw,hidepid=2\n", "/proc", set()) == ""
    # ptraceable lists only what the caller may ptrace: no other user's process.
    assert parse_hidepid("1 0 0:5 / /proc rw - proc proc rw,hidepid=ptraceable\n", "/proc",
                         set()) == "ptraceable"
    assert ProcFS(root="/nonexistent").hidepid() == ""


@pytest.mark.parametrize(("cgroup", "unit"), [
    # A container or machine running its own systemd names units inside its own cgroup: root
    # in it may call one nvidia-persistenced.service, and a host's rule on that unit (which
    # root alone starts on the host) must not match it.
    (f"/machine.slice/libpod-{'ab' * 32}.scope/container/system.slice/nvidia-persistenced.service",
     f"libpod-{'ab' * 32}.scope"),
    (f"/system.slice/docker-{'ab' * 32}.scope/system.slice/train.service",
     f"docker-{'ab' * 32}.scope"),
    (f"/docker/{'ab' * 32}/system.slice/train.service", None),
    ("/machine.slice/systemd-nspawn@box.service/payload/system.slice/infer.service",
     "systemd-nspawn@box.service"),
    # ... whatever it nests inside, under another container's name
    (f"/machine.slice/systemd-nspawn@f.service/payload/nvidia-persistenced.service/docker/"
     f"{'ab' * 32}", "systemd-nspawn@f.service"),
])
def test_a_unit_inside_a_container_is_the_containers_own(cgroup: str, unit: str | None) -> None:
    assert unit_and_container(cgroup)[0] == unit


def test_fixture_status_of_real_torch_jobs() -> None:
    text = (FIXTURES / "nvidia-h200" / "three-torch-holders.txt").read_text()
    assert "0000000001001006" in text  # the deaf job's SigIgn, as captured


def test_scanner_ignores_its_own_probe_children(node: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", f"f=open({node!r});import time;time.sleep(30)"])
    try:
        import time as _t
        _t.sleep(0.5)
        result = scan_holders(inventory(node), exclude={child.pid})
        assert child.pid not in {h.pid for h in result.holders}
    finally:
        child.kill()
        child.wait()


def test_forked_workers_find_the_same_holders(node: str, holders: Holders) -> None:
    _, pid1 = holders.start(node)
    _, pid2 = holders.start(node, mode="deaf")
    alone = scan_holders(inventory(node))
    # In a fresh interpreter, where nothing else runs threads (then nothing
    # forks, by design), with workers even for this small host.
    code = f"""
import json
import suspendguard.guard.scan as s
from suspendguard.config import DevicesConfig
from suspendguard.guard.inventory import take_inventory
s.PIDS_PER_WORKER = 1
s.MAX_WORKERS = 3
r = s.scan_holders(take_inventory(DevicesConfig((), ({node!r},), ())))
print(json.dumps([[h.pid, [[n.node.path, n.seen_as, n.via] for n in h.nodes]] for h in r.holders]
                 + [r.scanned, list(r.unreadable_pids)]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    *found, scanned, unreadable = json.loads(proc.stdout)
    assert {pid for pid, _ in found} >= {pid1, pid2}
    assert found == [[h.pid, [[n.node.path, n.seen_as, n.via] for n in h.nodes]]
                     for h in alone.holders]
    assert unreadable == list(alone.unreadable_pids)
    assert scanned > 0


def _map_only_in_own_dev(holders: Holders, zero: str) -> int:
    """A job in a mount namespace of its own mapping its own /dev/davinci0 (rdev 1:5):
    only /proc/PID/map_files leads from that mapping to the node."""
    script = (
        "mount -t tmpfs none /dev && mknod /dev/davinci0 c 1 5 && "
        f'exec "$0" {HOLDER} --node /dev/davinci0 --mode map --marker {holders.marker}'
    )
    _, pid = holders.start(zero, argv_prefix=["unshare", "-m", "--propagation", "private",
                                               "sh", "-c", script, sys.executable, "--"])
    return pid


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("setpriv") is None,
                    reason="needs unshare and setpriv")
def test_map_files_refusal_is_a_counted_warning(tmp_path: Path, holders: Holders) -> None:
    zero = tmp_path / "zero0"
    os.mknod(zero, 0o666 | 0o020000, os.makedev(1, 5))
    pid = _map_only_in_own_dev(holders, str(zero))
    [h] = [h for h in scan_holders(inventory(str(zero))).holders if h.pid == pid]
    assert [(hn.via, hn.seen_as) for hn in h.nodes] == [("map", "/dev/davinci0")]
    conf = tmp_path / "guard.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{zero}"]\n[idle]\nbackends = []\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n')
    # Root without CAP_SYS_ADMIN (and CAP_CHECKPOINT_RESTORE): the kernel
    # refuses map_files, and the guard says so instead of missing it quietly.
    done = subprocess.run(["setpriv", "--bounding-set=-sys_admin,-checkpoint_restore",
                           sys.executable, "-m", "suspendguard", "--config", str(conf), "check",
                           "--dry-run", "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout)
    assert [x["pid"] for x in report["holders"]] == []
    [warning] = [w for w in report["warnings"] if "map_files" in w]
    assert warning.startswith("1 process map a device file whose /proc/PID/map_files link")
    assert f"(pids {pid})" in warning
    # As root that process could not be inspected, and nothing else answers for it.
    assert report["verdict"] == "unknown"
    assert report["reasons"][0].startswith(f"1 process could not be inspected as root (pids {pid})")


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")
def test_a_mapping_of_a_node_deleted_since_still_holds_it(tmp_path: Path, holders: Holders) -> None:
    # The job closed its fd and kept the mapping; its node was removed and made again since
    # (a driver reset, udev): maps names "/dev/davinci0 (deleted)", a line that was skipped.
    zero = tmp_path / "zero0"
    os.mknod(zero, 0o666 | 0o020000, os.makedev(1, 5))
    pid = _map_only_in_own_dev(holders, str(zero))
    own = f"/proc/{pid}/root/dev/davinci0"  # in the job's mount namespace alone
    os.unlink(own)
    os.mknod(own, 0o666 | 0o020000, os.makedev(1, 5))
    assert " /dev/davinci0 (deleted)\n" in Path(f"/proc/{pid}/maps").read_text()
    [h] = [h for h in scan_holders(inventory(str(zero))).holders if h.pid == pid]
    assert [(hn.via, hn.seen_as) for hn in h.nodes] == [("map", "/dev/davinci0 (deleted)")]


def test_shared_anonymous_memory_is_no_mapping_of_a_node(tmp_path: Path, node: str) -> None:
    # Every process with MAP_SHARED anonymous memory shows "/dev/zero (deleted)": the kernel's
    # shmem file, not a node, and not stat-ed (map_files refused would be a warning for each).
    # Here its map_files link leads to the node: only what the line is keeps it out.
    fake = tmp_path / "proc" / "101"
    (fake / "fd").mkdir(parents=True)
    (fake / "map_files").mkdir()
    (fake / "stat").write_bytes(Path("/proc/self/stat").read_bytes())
    spans = ["7f0000000000-7f0000001000", "7f0000001000-7f0000002000"]
    (fake / "maps").write_text(f"{spans[0]} rw-s 00000000 00:01 999 /dev/zero (deleted)\n"
                               f"{spans[1]} rw-s 00000000 00:1a 998 /dev/shm/x (deleted)\n")
    for span in spans:
        os.symlink(node, fake / "map_files" / span)
    scanner = scan._Scanner(inventory(node), ProcFS(str(tmp_path / "proc")))
    assert scan._held_in(scanner, [101], frozenset()) == ({}, [], [])


class StuckMaps(ProcFS):
    """/proc as it is, but reading one process's maps never returns: what a read does behind
    a process stuck in a driver call with its memory's lock taken (a hung kernel path no
    test can bring about safely)."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.stuck = pid
        self.release = threading.Event()  # for a read left behind in a thread of this process

    def read(self, pid: int | str, name: str, at: int | None = None) -> bytes | None:
        if pid == self.stuck and name.endswith("maps"):
            self.release.wait(3600)
        return super().read(pid, name, at)


def test_a_scan_that_blocks_is_ended_by_its_bound_and_counts_as_not_inspected(
        node: str, holders: Holders) -> None:
    _, held = holders.start(node)
    _, stuck = holders.start(node)
    started = time.monotonic()
    result = scan_holders(inventory(node), StuckMaps(stuck), until=started + 2.0)
    assert time.monotonic() - started < 10
    assert stuck in result.late and stuck in result.unreadable_pids
    # The worker killed at the bound was reaped: no zombie of it is left behind.
    me = os.getpid()
    time.sleep(0.3)  # a zombie it would be by now
    children = [int(c) for c in Path(f"/proc/{me}/task/{me}/children").read_text().split()]
    assert [c for c in children if (st := ProcFS().stat(c)) and st.state == "Z"] == []
    assert set(result.late) <= set(result.unreadable_pids)
    # The share of the scan that blocked is lost whole; without a bound it never returns.
    assert held in {h.pid for h in result.holders} | set(result.late)
    assert scan_holders(inventory(node)).holders  # unbounded, nothing stuck: found


def test_a_scan_that_blocks_in_a_threaded_process_is_ended_by_its_bound_all_the_same(
        node: str, holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    # Once a hung NVML or DCMI call is left in a thread (idle/base.py), nothing forks: the
    # bounded scan ran in-process with no bound, held up by the same wedged driver.
    _, held = holders.start(node)
    _, stuck = holders.start(node)
    proc = StuckMaps(stuck)
    monkeypatch.setattr(scan, "PIDS_PER_WORKER", 1)  # several shares on this small host too
    # Another thread alive (that, unbounded, would end the stuck read in the end).
    alive = threading.Timer(10.0, proc.release.set)
    alive.start()
    try:
        started = time.monotonic()
        result = scan_holders(inventory(node), proc, until=started + 1.0)
        assert time.monotonic() - started < 5
        assert stuck in result.late and set(result.late) <= set(result.unreadable_pids)
        assert held in {h.pid for h in result.holders} | set(result.late)
    finally:
        proc.release.set()
        alive.cancel()
        alive.join()


def test_a_run_whose_scan_blocks_answers_unknown_by_its_deadline(
        make_config: Any, node: str, holders: Holders) -> None:
    _, stuck = holders.start(node)
    started = time.monotonic()
    report = guard(make_config(drain={"timeout_s": 2, "deadline_s": 6}), proc=StuckMaps(stuck))
    assert time.monotonic() - started < 6 + 5
    assert report.verdict.kind == "unknown", report.verdict
    assert any("did not answer by the run's deadline" in w for w in report.verdict.warnings)
    assert holders.signals() == []


def test_a_jobs_relative_log_folder_is_taken_from_its_working_folder(tmp_path: Path) -> None:
    """CANN resolves ASCEND_PROCESS_LOG_PATH=plog from the job's working folder, and so
    does the guard; a job whose environment names none has none."""
    env = {"PATH": os.environ["PATH"], "ASCEND_PROCESS_LOG_PATH": "plog",
           "ASCEND_WORK_PATH": str(tmp_path / "work")}
    named = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env,
                             cwd=tmp_path)
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            env={"PATH": os.environ["PATH"]})
    try:
        assert wait_for(lambda: log_dirs(ProcFS(), named.pid), 5) == (
            str(tmp_path / "plog"), str(tmp_path / "work" / "log"))
        assert log_dirs(ProcFS(), bare.pid) == ()
    finally:
        for p in (named, bare):
            p.kill()
            p.wait()

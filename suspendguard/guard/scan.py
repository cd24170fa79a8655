"""Find every process holding an inventoried node: open fds and live mappings.

Nodes are matched by identity (rdev for character devices), never by name: a container's
own node under another name still holds the device. Links are read first (one readlink
per fd); only absolute targets are stat-ed, once per path and mount namespace.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Collection, Sequence
from typing import Any

from suspendguard.guard.describe import describe_process
from suspendguard.guard.inventory import identity
from suspendguard.model import HeldNode, Inventory, Node, NodeKey, ScanResult
from suspendguard.system.io_uring import registered_files, unlisted
from suspendguard.system.kcmp import same_files
from suspendguard.system.procfs import IO_URING, ProcAccessError, ProcFS
from suspendguard.system.workers import run_shares

_GONE = (errno.ENOENT, errno.ESRCH)
_FLAGS = re.compile(rb"^flags:\s*([0-7]+)$", re.M)  # an fd's open flags, in its fdinfo
# Shared anonymous memory (MAP_SHARED of /dev/zero, or MAP_ANONYMOUS) as maps names it: the
# kernel's own shmem file, in almost every process, and no node. Any other deleted /dev
# mapping may be a node removed or recreated since (a driver reset, udev, a container's own
# /dev): map_files still reaches its device.
_SHARED_ZERO = b"/dev/zero (deleted)"


class _Scanner:
    def __init__(self, inventory: Inventory, proc: ProcFS) -> None:
        self.proc = proc
        self.nodes = inventory.by_key()
        self.by_file = {n.file_id: n for n in inventory.nodes}
        self.by_name: dict[str, list[Node]] = {}
        for n in inventory.nodes:
            self.by_name.setdefault(os.path.basename(n.path), []).append(n)
        self.map_sigs = {
            f" {os.major(dev):02x}:{os.minor(dev):02x} {ino} ".encode(): node
            for (dev, ino), node in self.by_file.items()
        }
        # This process's own /proc: its pids are kcmp's too.
        self.live = proc.root == "/proc"
        self.own_ns = proc.mnt_ns("self") if self.live else None
        self.path_cache: dict[str, dict[str, Node | None]] = {}  # mount ns: path: node
        self.map_cache: dict[bytes, Node | None] = {}
        # Processes with a /dev mapping whose map_files link the kernel
        # refused to follow: a node held only so is missed for them.
        self.maps_refused: set[int] = set()
        # The kernel's release, as the /proc read says it: how a ring lists its files.
        release = proc.read("sys", "kernel/osrelease")
        self.release = release.decode("ascii", "replace").strip() if release else None

    def held_by(self, pid: int, maps: bool) -> tuple[int, list[HeldNode]] | None:
        """(start time, nodes held) of the process that has ``pid`` now; None when it holds none.

        Every read goes through one fd on /proc/PID, which keeps naming this process even if
        another takes its PID mid-scan, and the start time is read through it last: the
        drain compares with it before it signals."""
        at = self.proc.open_dir(pid)
        if at is None:
            return None
        try:
            threads = self.proc.thread_count(at)
            held = self.held_fds(pid, at, threads)
            if maps:
                held.extend(self.held_maps(pid, at, threads))
            if not held:
                return None
            st = self.proc.stat(pid, at)
        finally:
            os.close(at)
        return None if st is None else (st.start_time, held)

    # -- fds --------------------------------------------------------------

    def held_fds(self, pid: int, at: int, threads: int = 1) -> list[HeldNode]:
        held = self._held_in_table(pid, at, ("fd",))
        if threads > 1:
            for tid in self._own_tables(pid, at):
                held.extend(self._held_in_table(pid, at, ("task", str(tid), "fd")))
        return held

    def _own_tables(self, pid: int, at: int) -> list[int]:
        """The threads whose fd table is neither the leader's nor one read already.

        Threads share their process's table unless one called
        unshare(CLONE_FILES); a leader that has exited (pthread_exit) has
        none left, and its threads' fds show only under task/TID/fd. kcmp
        tells in one call per thread; where it cannot (no kcmp, another
        /proc root), every thread's table is read.
        """
        tables = [pid]
        own = []
        for tid in self.proc.task_ids(at):
            if tid == pid:
                continue
            if self.live and any(same_files(t, tid) for t in tables):
                continue
            tables.append(tid)
            own.append(tid)
        return own

    def _held_in_table(self, pid: int, at: int, folder: tuple[str, ...]) -> list[HeldNode]:
        paths = self.proc.open_paths(pid, at, "/".join(folder), rings=True)
        if not paths:
            return []
        ns = self.proc.mnt_ns(pid, at)
        # Almost every path was seen in another process of the same mount
        # namespace already: the hot loop is one dict lookup per fd.
        known = self.path_cache.setdefault(ns, {}) if ns is not None else {}
        held: list[HeldNode] = []
        info = "/".join((*folder[:-1], "fdinfo", ""))  # + fd: its fdinfo, read where needed
        for fd, target in paths:
            if target == IO_URING:
                held.extend(self._registered(pid, at, ns, info + fd))
                continue
            try:
                node = known[target]
            except KeyError:
                node = self._node_of(pid, ns, (*folder, fd), target, known)
            if node is not None and not self._only_a_path(pid, at, info + fd):
                held.append(HeldNode(node, target, "fd"))
        return held

    def _only_a_path(self, pid: int, at: int, fdinfo: str) -> bool:
        """An O_PATH fd (udevd sets a node's mode through one) names the node but never
        opened it: the driver holds nothing for it, and its process is no holder."""
        found = _FLAGS.search(self.proc.read(pid, fdinfo, at) or b"")
        return found is not None and bool(int(found.group(1), 8) & os.O_PATH)

    def _node_of(self, pid: int, ns: str | None, link: tuple[str, ...], target: str,
                 known: dict[str, Node | None]) -> Node | None:
        """The inventoried node ``target`` is, stat-ed once per path and namespace (a deleted
        file's path may name another file by now: stat-ed through its link, never kept)."""
        deleted = target.endswith(" (deleted)")
        # In our own namespace the path names the same file for everyone, where it can be
        # reached: a mount lazily unmounted hides it, and then, as in another namespace, only
        # the magic link itself reaches the real file (for this fd alone).
        own, fell_back = ns is not None and ns == self.own_ns and not deleted, False
        st: os.stat_result | None = None
        if own:
            try:
                st = os.stat(target)
            except OSError:
                fell_back = True
        if not own or fell_back:
            st = self.proc.link_stat(pid, *link)
        node = None if st is None else self.nodes.get(identity(st))
        if not deleted and st is not None and not fell_back:
            known[target] = node
        return node

    def _registered(self, pid: int, at: int, ns: str | None, fdinfo: str) -> list[HeldNode]:
        """The nodes an io_uring of ``pid`` holds as registered files (system/io_uring.py)."""
        for attempt in range(3):  # the list is left out while the ring's lock is taken
            data = self.proc.read(pid, fdinfo, at) or b""
            if not unlisted(data, self.release):
                break
            time.sleep(0.01 * (attempt + 1))
        else:
            raise ProcAccessError(f"pid {pid}: its io_uring does not list its registered files")
        held: list[HeldNode] = []
        for path in registered_files(data):
            if "/" not in path:  # before Linux 6.14, the file's last name alone
                held.extend(HeldNode(n, path, "io_uring") for n in self.by_name.get(path, ()))
                continue
            # Its path is as this process sees the file where it shares the mount namespace.
            where = path if ns is not None and ns == self.own_ns else self.proc.path(
                pid, "root") + path
            try:
                node = self.nodes.get(identity(os.stat(where)))
            except OSError:
                continue
            if node is not None:
                held.append(HeldNode(node, path, "io_uring"))
        return held

    # -- mappings ---------------------------------------------------------

    def held_maps(self, pid: int, at: int, threads: int = 1) -> list[HeldNode]:
        data = self.proc.read(pid, "maps", at)
        if not data and threads > 1:
            # The leader has exited and took its view of the memory with it;
            # any other thread still shows the mappings they all share.
            tid = next((t for t in self.proc.task_ids(at) if t != pid), None)
            data = None if tid is None else self.proc.read(pid, f"task/{tid}/maps", at)
        if not data:
            return []
        found = [node for sig, node in self.map_sigs.items()
                 if sig in data and _mapped(data, sig)]
        held = [HeldNode(n, n.path, "map") for n in found]
        if b" /dev/" in data:
            held.extend(self._dev_maps(pid, data, {n.key for n in found}))
        return held

    def _dev_maps(self, pid: int, data: bytes, have: set[NodeKey]) -> list[HeldNode]:
        out: list[HeldNode] = []
        for line in data.split(b"\n"):
            if b" /dev/" not in line:
                continue
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[4] == b"0":
                continue
            path = parts[5]
            if path.startswith(b"/dev/shm/") or path == _SHARED_ZERO:
                continue
            ident = parts[3] + b" " + parts[4]
            if b" " + ident + b" " in self.map_sigs:
                continue  # a node's own file, matched above
            if ident in self.map_cache:
                node = self.map_cache[ident]
            else:
                try:
                    st = self.proc.map_file_stat(pid, "map_files", parts[0].decode())
                except ProcAccessError:
                    self.maps_refused.add(pid)
                    continue
                node = None if st is None else self.nodes.get(identity(st))
                if st is not None:  # a mapping gone meanwhile says nothing of the next one
                    self.map_cache[ident] = node
            if node is not None and node.key not in have:
                have.add(node.key)
                out.append(HeldNode(node, path.decode("utf-8", "replace"), "map"))
        return out


def scan_holders(
    inventory: Inventory,
    proc: ProcFS | None = None,
    exclude: Collection[int] = (),
    maps_known: Collection[int] = (),
    until: float | None = None,
) -> ScanResult:
    """Every process holding a node of ``inventory``, never aborting on a race; by ``until``
    (a time.monotonic() time) where given, what was not read by then counted unreadable.

    ``maps_known``: pids whose mappings are not read (a rescan's: those the
    look listed, and read): such a process shows a node it opened since by
    its fd, as a job does first. Every other process's mappings are read: a
    child forked since inherits its parent's, of a node whose fd the parent
    had closed too.
    """
    proc = proc or ProcFS()
    if not inventory.nodes:
        return ScanResult((), 0, (), 0)
    scanner = _Scanner(inventory, proc)
    skip = {os.getpid(), *exclude}
    pids = [pid for pid in proc.pids() if pid not in skip]
    workers = min(MAX_WORKERS, os.cpu_count() or 1, max(1, len(pids) // PIDS_PER_WORKER))
    late: list[int] = []
    found, unreadable, maps_refused = _held_parallel(scanner, pids, workers,
                                                     frozenset(maps_known), until, late)
    holders = []
    for pid in sorted(found):
        start_time, held = found[pid]
        try:
            holder = describe_process(pid, held, proc, start_time=start_time)
        except ProcAccessError:
            unreadable.append(pid)
            continue
        if holder is not None:
            holders.append(holder)
    return ScanResult(tuple(holders), len(unreadable), tuple(sorted(unreadable)), len(pids),
                      tuple(sorted(maps_refused)), frozenset(pids), tuple(sorted(late)))


# Almost all of a scan is kernel time in readlink() on /proc, one call per fd,
# as for fuser. On a busy host (thousands of processes) disjoint pid ranges
# are scanned by forked workers: every core works and, unlike threads, the
# Python side of each call is not serialised by the GIL. A small host is
# scanned in one: forked for its bound (``until``) alone, in-process without one.
MAX_WORKERS = 4
PIDS_PER_WORKER = 500
# The least a bounded scan is given, whatever is left of the run (a wait on a locked history
# may have taken it all): a scan of a busy host takes a fraction of that.
MIN_SCAN_S = 1.0


def scan_until(left_s: float) -> float:
    """The time.monotonic() time that bounds a scan of a run with ``left_s`` seconds left."""
    return time.monotonic() + max(left_s, MIN_SCAN_S)

_Found = dict[int, tuple[int, list[HeldNode]]]  # pid: (start time, nodes held)
# What a share of the scan found: holders, unreadable pids, pids whose map_files refused.
_Share = tuple[_Found, list[int], list[int]]


def _held_in(scanner: _Scanner, pids: Sequence[int], maps_known: frozenset[int]) -> _Share:
    found: _Found = {}
    unreadable: list[int] = []
    for pid in pids:
        try:
            held = scanner.held_by(pid, pid not in maps_known)
        except ProcAccessError:
            unreadable.append(pid)
            continue
        except OSError as exc:
            if exc.errno in _GONE:
                continue
            raise
        if held:
            found[pid] = held
    # Shares may run side by side in threads (system/workers.py): each takes its own pids'.
    return found, unreadable, sorted(scanner.maps_refused.intersection(pids))


def _held_parallel(scanner: _Scanner, pids: list[int], workers: int,
                   maps_known: frozenset[int], until: float | None = None,
                   late: list[int] | None = None) -> _Share:
    nodes = list(scanner.nodes.values())
    index = {n.key: i for i, n in enumerate(nodes)}

    def work(part: list[int]) -> _Share:
        return _held_in(scanner, part, maps_known)

    def to_wire(result: _Share) -> Any:
        found, unreadable, refused = result
        return [[[pid, start, [[index[h.node.key], h.seen_as, h.via] for h in held]]
                 for pid, (start, held) in found.items()], unreadable, refused]

    def from_wire(wire: Any) -> _Share:
        found = {int(pid): (int(start), [HeldNode(nodes[n], seen, via) for n, seen, via in held])
                 for pid, start, held in wire[0]}
        return found, [int(p) for p in wire[1]], [int(p) for p in wire[2]]

    found: _Found = {}
    unreadable: list[int] = []
    refused: list[int] = []
    def unanswered(part: list[int]) -> _Share:
        if late is not None:
            late.extend(part)
        return {}, list(part), []

    for part_found, part_unreadable, part_refused in run_shares(
            [pids[i::workers] for i in range(workers)], work, to_wire, from_wire,
            until=until, late=unanswered):
        found.update(part_found)
        unreadable.extend(part_unreadable)
        refused.extend(part_refused)
    return found, unreadable, refused


def _mapped(data: bytes, sig: bytes) -> bool:
    """Whether a line of ``maps`` has ``sig`` in its device and inode fields: a file's name,
    which its owner chooses, may hold the same text."""
    want = sig.split()
    return any(sig in line and line.split(None, 5)[3:5] == want for line in data.split(b"\n"))

"""Reading /proc (and the cgroup tree) through one configurable root.

Processes vanish mid-read and some entries refuse even root: every reader turns that into
``None`` (gone) or ``ProcAccessError`` (refused) where it happens; the guard's own want
of fds or memory is raised, never read as "nothing"."""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import re
from dataclasses import dataclass
from functools import lru_cache

from suspendguard.model import SignalMasks

_GONE = (errno.ENOENT, errno.ESRCH)
_REFUSED = (errno.EACCES, errno.EPERM)
_SCARCE = (errno.EMFILE, errno.ENFILE, errno.ENOMEM)  # this process's want, not the entry's
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
IO_URING = "anon_inode:[io_uring]"


class ProcAccessError(Exception):
    """An entry exists but may not be read (EACCES/EPERM)."""


@dataclass(frozen=True, slots=True)
class Stat:
    comm: str
    state: str
    ppid: int
    start_time: int
    pgrp: int  # the process group (field 5)


@dataclass(frozen=True, slots=True)
class Status:
    uid: int
    masks: SignalMasks
    nspid: tuple[int, ...]
    kthread: bool
    gid: int = -1  # the real gid; -1 when the file named none
    groups: tuple[int, ...] = ()  # the supplementary groups


def _refused(exc: OSError) -> None:
    if exc.errno in _REFUSED:
        raise ProcAccessError(str(exc)) from None


def _scarce_or_refused(exc: OSError) -> None:
    """Raise a refusal, or this process's want of fds or memory: no answer about the entry."""
    _refused(exc)
    if exc.errno in _SCARCE:
        raise exc


def _gone_or_refused(exc: OSError) -> None:
    _refused(exc)
    if exc.errno not in _GONE:
        raise exc


class ProcFS:
    def __init__(self, root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> None:
        self.root = root
        self.cgroup_root = cgroup_root

    def path(self, pid: int | str, *parts: str) -> str:
        return "/".join((self.root, str(pid), *parts))

    def exists(self, pid: int) -> bool:
        return os.path.exists(self.path(pid))

    def pids(self) -> list[int]:
        return [int(name) for name in os.listdir(self.root) if name.isdigit()]

    def read(self, pid: int | str, name: str, at: int | None = None) -> bytes | None:
        """The content of /proc/PID/NAME; through ``at`` (an :meth:`open_dir` fd) when given."""
        # os.open/os.read: for thousands of small files open()'s io layers cost more.
        try:
            if at is None:
                fd = os.open(f"{self.root}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            else:
                fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=at)
        except OSError as exc:
            _gone_or_refused(exc)
            return None
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            _gone_or_refused(exc)
            return None
        finally:
            os.close(fd)

    def open_dir(self, pid: int) -> int | None:
        """An fd on /proc/PID that names this process and no other; None when it is gone.

        Every read through it (``at=`` of the readers here) reaches the process that had the
        PID when it was opened, or fails once that one has been reaped: a process that takes
        the PID over is never read through it (how the scan fixes a holder's identity).
        """
        try:
            return os.open(self.path(pid), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            _gone_or_refused(exc)
            return None

    def thread_count(self, at: int) -> int:
        """How many threads the process of ``at`` has (the task folder's link count less two)."""
        try:
            return max(1, os.stat("task", dir_fd=at).st_nlink - 2)
        except OSError:
            return 1

    def task_ids(self, at: int) -> list[int]:
        try:
            fd = os.open("task", _DIR_FLAGS, dir_fd=at)
        except OSError:
            return []
        try:
            return [int(t) for t in os.listdir(fd) if t.isdigit()]
        except OSError:
            return []
        finally:
            os.close(fd)

    def stat(self, pid: int, at: int | None = None) -> Stat | None:
        data = self.read(pid, "stat", at)
        if not data:
            return None
        return parse_stat(data)

    def status(self, pid: int) -> Status | None:
        data = self.read(pid, "status")
        if data is None:
            return None
        return parse_status(data.decode("utf-8", "replace"))

    def cmdline(self, pid: int) -> tuple[str, ...]:
        try:
            data = self.read(pid, "cmdline")
        except ProcAccessError:
            return ()
        if not data:
            return ()
        return tuple(p.decode("utf-8", "replace") for p in data.rstrip(b"\0").split(b"\0"))

    def open_paths(self, pid: int, at: int | None = None, folder: str = "fd",
                   rings: bool = False) -> list[tuple[str, str]]:
        """(fd, path) for each fd of ``pid`` whose link names a path; with ``rings``, each
        io_uring's fd too (its link :data:`IO_URING`), whose registered files hold theirs.
        ``at``: read through that :meth:`open_dir` fd; ``folder``: another task's fd table
        (``task/TID/fd``). Sockets, pipes, other anonymous inodes and fds closed meanwhile are
        left out. The scan's hot loop: one readlink per fd, relative to the fd folder."""
        try:
            if at is None:
                dfd = os.open(self.path(pid, folder), _DIR_FLAGS)
            else:
                dfd = os.open(folder, _DIR_FLAGS, dir_fd=at)
        except OSError as exc:
            _scarce_or_refused(exc)
            return []
        try:
            names = os.listdir(dfd)
        except OSError as exc:
            os.close(dfd)
            _scarce_or_refused(exc)
            return []
        paths = []
        readlink = os.readlink  # a local: this line runs once per fd on the host
        try:
            for name in names:
                try:
                    target = readlink(name, dir_fd=dfd)
                except OSError as exc:  # closed meanwhile, or a path over PATH_MAX (no node's)
                    if exc.errno in _SCARCE:
                        raise
                    continue
                if target[0] == "/" or (rings and target == IO_URING):
                    paths.append((name, target))
        finally:
            os.close(dfd)
        return paths

    def anon_fds(self, at: int, folder: str, kind: str) -> list[str]:
        """The fds in ``folder`` (an fd table under ``at``) that are anonymous inodes of ``kind``."""
        found = []
        with contextlib.suppress(OSError):
            dfd = os.open(folder, _DIR_FLAGS, dir_fd=at)
            try:
                for name in os.listdir(dfd):
                    with contextlib.suppress(OSError):
                        if os.readlink(name, dir_fd=dfd) == f"anon_inode:[{kind}]":
                            found.append(name)
            finally:
                os.close(dfd)
        return found

    def link_stat(self, pid: int, *parts: str) -> os.stat_result | None:
        """The stat of the file a magic link (fd/N, map_files/SPAN) leads to; None if it cannot."""
        try:
            return self.map_file_stat(pid, *parts)
        except ProcAccessError:
            return None

    def map_file_stat(self, pid: int, *parts: str) -> os.stat_result | None:
        """As :meth:`link_stat`, but a refusal raises ProcAccessError instead of reading None.

        Following /proc/PID/map_files/SPAN takes CAP_SYS_ADMIN in the initial user namespace
        (or CAP_CHECKPOINT_RESTORE, from Linux 5.9): root without it gets EPERM.
        """
        try:
            return os.stat(self.path(pid, *parts))
        except OSError as exc:
            _refused(exc)
            return None

    def link(self, pid: int, name: str) -> str:
        """Where /proc/PID/NAME points (``exe``, ``cwd``); "" when it cannot be read."""
        try:
            return os.readlink(self.path(pid, name))
        except OSError:
            return ""

    def cgroup(self, pid: int) -> str | None:
        """The cgroup v2 path (or the systemd v1 one) of a process."""
        try:
            data = self.read(pid, "cgroup")
        except ProcAccessError:
            return None
        if data is None:
            return None
        return parse_cgroup(data.decode("utf-8", "replace"))

    def cgroup_frozen(self, cgroup: str | None) -> bool:
        """True when the process's cgroup (v2 freezer) is frozen."""
        root = self.unified_root()
        if not cgroup or root is None:
            return False
        try:
            with open(os.path.join(root, cgroup.lstrip("/"), "cgroup.events")) as f:
                for line in f:
                    if line.startswith("frozen "):
                        return line.split()[1] == "1"
        except OSError:
            return False
        return False

    def thaw_file(self, pid: int, cgroup: str | None) -> str:
        """The file that thaws ``pid`` when a freezer holds it, else "": the frozen cgroup's
        cgroup.freeze (v2), or its freezer.state, FROZEN or FREEZING (v1, hybrid hosts); both
        report the state their ancestors impose too."""
        root = self.unified_root()
        if self.cgroup_frozen(cgroup) and root is not None and cgroup:
            return os.path.join(root, cgroup.lstrip("/"), "cgroup.freeze")
        try:
            data = self.read(pid, "cgroup")
        except ProcAccessError:
            return ""
        for line in (data or b"").decode("utf-8", "replace").split("\n"):
            parts = line.split(":", 2)
            if len(parts) == 3 and "freezer" in parts[1].split(","):
                state = os.path.join(self.cgroup_root, "freezer", parts[2].lstrip("/"),
                                     "freezer.state")
                try:
                    with open(state) as f:
                        frozen = f.read().strip() in ("FROZEN", "FREEZING")
                except OSError:
                    return ""
                return state if frozen else ""
        return ""

    def unified_root(self) -> str | None:
        """Where the cgroup v2 tree is mounted: the root itself, or unified/ on hybrid hosts."""
        if not hasattr(self, "_unified"):
            self._unified: str | None = None
            for root in (self.cgroup_root, os.path.join(self.cgroup_root, "unified")):
                if os.path.exists(os.path.join(root, "cgroup.controllers")):
                    self._unified = root
                    break
        return self._unified

    def hidepid(self) -> str:
        """This /proc's ``hidepid=`` where it hides other users' processes from this caller
        (``invisible``, ``ptraceable``; ``2`` before 5.8), else "": they are not even listed.
        Members of the mount's ``gid=`` group see every process."""
        try:
            data = self.read("self", "mountinfo") or b""
        except ProcAccessError:
            return ""
        return parse_hidepid(data.decode("utf-8", "replace"), os.path.realpath(self.root),
                             {os.getegid(), *os.getgroups()})

    def mnt_ns(self, pid: int | str, at: int | None = None) -> str | None:
        """The mount namespace of ``pid`` (``mnt:[INODE]``); through ``at`` when given."""
        try:
            if at is None:
                return os.readlink(self.path(pid, "ns", "mnt"))
            return os.readlink("ns/mnt", dir_fd=at)
        except OSError:
            return None


def parse_stat(data: bytes) -> Stat | None:
    text = data.decode("utf-8", "replace")
    lpar = text.find("(")
    rpar = text.rfind(")")
    if lpar < 0 or rpar < 0:
        return None
    fields = text[rpar + 2:].split()
    try:
        # fields[0] is field 3 (state); the process group is field 5, the start time 22.
        return Stat(text[lpar + 1:rpar], fields[0], int(fields[1]), int(fields[19]),
                    int(fields[2]))
    except (IndexError, ValueError):
        return None


def parse_status(text: str) -> Status:
    # At "\n" alone: splitlines() reads a process named "job\x1cKthread:1" as two lines.
    values: dict[str, str] = {}
    for line in text.split("\n"):
        key, _, value = line.partition(":")
        values[key] = value.strip()

    def hexval(key: str) -> int:
        try:
            return int(values.get(key, "0"), 16)
        except ValueError:
            return 0

    def real(key: str) -> int:  # the real id of Uid: and Gid: (real, effective, saved, fs)
        try:
            return int(values.get(key, "-1").split()[0])
        except (ValueError, IndexError):
            return -1

    nspid = tuple(int(x) for x in values.get("NSpid", "").split() if x.isdigit())
    return Status(
        uid=real("Uid"),
        masks=SignalMasks(blocked=hexval("SigBlk"), ignored=hexval("SigIgn"),
                          caught=hexval("SigCgt")),
        nspid=nspid,
        kthread=values.get("Kthread", "0") == "1",
        gid=real("Gid"),
        groups=tuple(int(g) for g in values.get("Groups", "").split() if g.isdigit()),
    )


_HIDING = ("2", "invisible", "4", "ptraceable")  # ptraceable: no other user's is listed


def parse_hidepid(mountinfo: str, mount_point: str, groups: set[int]) -> str:
    """The hiding ``hidepid=`` of the last proc mount on ``mount_point`` in a mountinfo text."""
    hidden = ""
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(" "), tail.split(" ")
        if not sep or len(fields) < 5 or len(after) < 3 or after[0] != "proc":
            continue
        if re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]) != mount_point:
            continue
        options = dict(o.partition("=")[::2] for o in after[2].split(","))
        gid, hides = options.get("gid", ""), options.get("hidepid", "")
        exempt = gid.isdigit() and int(gid) in groups
        hidden = hides if hides in _HIDING and not exempt else ""
    return hidden


def parse_cgroup(text: str) -> str | None:
    fallback = None
    for line in text.split("\n"):
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2]
        if parts[1] == "name=systemd":
            fallback = parts[2]
    return fallback


@lru_cache(maxsize=256)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)

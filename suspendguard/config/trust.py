"""Whether root may trust a path, and what a configuration makes root execute, source, load or write.

Run as root, the guard signals every holder and runs the programs the
configuration names, so a file anyone else can change must not steer it.

The rule (:func:`problems`), for a path root is about to read, execute,
source or load: each component from ``/`` down (the file included, symlinks
included, and then every component of the path the symlinks lead to, a
``..`` stepping up from where they led) is owned by root, and none but a
sticky directory is group- or other-writable.
A sticky directory (``/tmp``) may be writable by all, because in it only an
entry's owner can rename or remove that entry, and its entry on the path
must be root's too. A path that does not exist yet is judged by the part
that does: nobody but root can create the rest, unless its first missing
entry would be made in a sticky folder, where anyone may: that is refused. The idle backends' default
tools and a holder's executable (guard/identity.py) are held to it too.

:func:`untrusted` lists the problems of the configuration file itself and
of every program path it names; the caller refuses to act on a
configuration with any. :func:`state_dir_problem` is the check of
``[state] dir``, where root creates and writes the history.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from suspendguard.config.backends import IDLE_BACKENDS
from suspendguard.config.schema import Config

_MAX_LINKS = 40  # as the kernel's own limit on symlinks followed in one lookup

# Folders that hold the system, other programs' state or everyone's files:
# never the guard's state folder (it would chmod and write files there).
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
    "/usr", "/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/sbin", "/usr/share",
    "/var", "/var/cache", "/var/lib", "/var/log", "/var/run", "/var/spool", "/var/tmp",
})

# The [idle] keys that name something root executes, sources or loads: the
# backends' own.
PROGRAM_KEYS = tuple(key for backend in IDLE_BACKENDS.values() for key in backend.keys)
# The [resume] keys that name something root executes or loads after resume.
RESUME_PROGRAM_KEYS = ("modprobe", "cuda_library")
# The [slurm] keys that name a program root executes: scontrol, run by ``slurm health``
# (slurmd's HealthCheckProgram, as root on every node) and ``slurm sync`` (root's timer).
SLURM_PROGRAM_KEYS = ("scontrol",)
# The [slurm] command lines whose first word `slurm suspend` and `slurm resume` run: the
# remote (ssh), the power actions, and the node's guard where the node is this host. They
# run as SlurmUser, whose files they may be, so only a run as root holds them to the rule
# (slurm_untrusted), and only that run: no other command runs them.
SLURM_ARGV_KEYS = ("remote", "guard", "power_off", "power_on")


def untrusted(config: Config, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Every reason root should not act on ``config`` (empty: it may)."""
    out: list[str] = []
    if config.path is not None:
        out += problems(absolute(config.path), "configuration file")
    programs = [("idle", key) for key in PROGRAM_KEYS]
    programs += [("resume", key) for key in RESUME_PROGRAM_KEYS]
    programs += [("slurm", key) for key in SLURM_PROGRAM_KEYS]
    out += _programs([(f"[{section}] {key}", getattr(getattr(config, section), key))
                      for section, key in programs], environ)
    out += problems(config.state.dir, "[state] dir")
    return tuple(dict.fromkeys(out))


def slurm_untrusted(config: Config, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Why root should not run the [slurm] command lines of ``config`` (empty: it may)."""
    return tuple(dict.fromkeys(_programs([(f"[slurm] {key}", argv[0])
                                          for key in SLURM_ARGV_KEYS
                                          if (argv := getattr(config.slurm, key))], environ)))


def _programs(named: list[tuple[str, str]], environ: Mapping[str, str]) -> list[str]:
    """Why root may not run (or load) each (what, program) named."""
    out: list[str] = []
    for what, value in named:
        if not value or (what == "[resume] cuda_library" and "/" not in value):
            # The built-in default places, not the configuration's choice; or a
            # library name, which the loader looks up in the system's own
            # folders, never on PATH.
            continue
        if "/" in value:
            out += problems(absolute(value), what)
        else:
            out += _on_path(value, what, environ.get("PATH", os.defpath))
    return out


def replaced(path: str, read: os.stat_result, what: str) -> tuple[str, ...]:
    """Why the file read (``read``: its descriptor's stat) is not the one ``path`` names now.

    The rule judges the path after the file was read: a file gone by then
    would pass as one that does not exist yet (in a sticky folder its owner
    may remove it at will), and one put in its place would be judged instead.
    """
    try:
        now = os.stat(path)  # resolved as the kernel opened it: relative to this folder
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (read.st_dev, read.st_ino):
        return (f"{what} {path}: replaced or removed while it was read",)
    return ()


def absolute(path: str) -> str:
    """``path`` from ``/`` as the kernel finds it: a relative one after the working folder.

    Never normalized as text (os.path.abspath): ``link/..`` is the folder above the
    link's target, not the folder that holds the link.
    """
    return os.path.join(os.getcwd(), path)


def _on_path(name: str, what: str, path: str) -> list[str]:
    """A bare command name: every PATH folder searched before (and holding) it must be trusted."""
    out: list[str] = []
    for folder in path.split(os.pathsep):
        if not folder or not os.path.isabs(folder):
            out.append(f"{what} {name}: PATH holds a relative folder {folder or '(empty)'!r}")
            continue
        candidate = os.path.join(folder, name)
        out += problems(candidate, what)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            break
    return out


def state_dir_problem(directory: str) -> str | None:
    """Why ``[state] dir`` cannot be the guard's state folder (None: it can)."""
    normal = os.path.normpath(directory)
    resolved = os.path.realpath(directory)
    for candidate in (normal, resolved):
        if candidate in SYSTEM_DIRS:
            return f"a folder of its own such as /var/lib/suspendguard, not the system folder {candidate}"
    return None


def problems(path: str, what: str) -> list[str]:
    """Why root should not trust ``path`` (``what`` names it: "config file", "[idle] npu_smi")."""
    if not os.path.isabs(path):
        return [f"{what} {path}: not an absolute path"]
    out: list[str] = []
    _walk(path, what, out)
    return list(dict.fromkeys(out))


def _walk(path: str, what: str, out: list[str]) -> None:
    """Judge each component as the kernel's lookup meets it, recording what is wrong.

    A symlink's target is walked in its place, and ``..`` steps up from the folder
    reached so far, after the symlinks that led there: the text before a ``..`` says
    nothing of where it leads once a symlink is in it.
    """
    todo = _parts(path)  # the components still to look up, the next one last
    current = "/"  # the folder reached: never a symlink, nor a ``..`` in it
    root = st = os.lstat(current)
    if _judge(current, st, what, path, out):
        return
    links = 0
    while todo:
        part = todo.pop()
        if not stat.S_ISDIR(st.st_mode):
            return  # a file used as a folder: the lookup fails, nothing to trust
        if part == ".":
            continue
        if part == "..":
            # Its folders were all judged on the way down: the one above is trusted.
            current = os.path.dirname(current)
            entry = current
        else:
            entry = os.path.join(current, part)
        parent = st
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            # The rest does not exist: its parent is trusted, so only root can make it,
            # unless it is a sticky folder, where anyone may.
            if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                out.append(f"{what} {path}: {entry} does not exist, and any user may "
                           f"create it in the sticky folder {current}")
            return
        except OSError as exc:
            out.append(f"{what} {path}: cannot inspect {entry}: {exc.strerror}")
            return
        if part == "..":
            continue
        if _judge(entry, st, what, path, out):
            return
        if not stat.S_ISLNK(st.st_mode):
            current = entry
            continue
        links += 1
        if links > _MAX_LINKS:
            out.append(f"{what} {path}: too many symlinks")
            return
        try:
            target = os.readlink(entry)
        except OSError as exc:
            out.append(f"{what} {path}: cannot read symlink {entry}: {exc.strerror}")
            return
        # The target's components come next, from / or from the folder holding the link.
        todo += _parts(target)
        current, st = ("/", root) if target.startswith("/") else (current, parent)


def _parts(path: str) -> list[str]:
    """The components of ``path`` as a stack: the first one last."""
    return [part for part in reversed(path.split("/")) if part]


def _judge(path: str, st: os.stat_result, what: str, shown: str, out: list[str]) -> bool:
    """Record what is wrong with one component; True when the walk should stop."""
    where = shown if path == shown else f"{shown} ({path})"
    if st.st_uid != 0:
        out.append(f"{what} {where}: owned by uid {st.st_uid}, not root")
        return True
    if stat.S_ISLNK(st.st_mode):
        return False  # a symlink's own mode means nothing; its target is walked
    sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_dir:
        who = ("group- and world-" if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH
               else "group-" if st.st_mode & stat.S_IWGRP else "world-")
        out.append(f"{what} {where}: {who}writable (mode {stat.S_IMODE(st.st_mode):04o})")
        return True
    return False

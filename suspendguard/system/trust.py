"""Whether root may trust a file: every component of its path is root's and only root's to change.

The rule, for a path root is about to read, execute, source or load: each
component from ``/`` down (the file included, symlinks included, and then
every component of the path the symlinks lead to) is owned by root, and none
but a sticky directory is group- or other-writable. A sticky directory
(``/tmp``) may be writable by all, because in it only an entry's owner can
rename or remove that entry, and its entry on the path must be root's too.
A path that does not exist yet is judged by the part that does: nobody but
root can create the rest.
"""

from __future__ import annotations

import os
import stat

_MAX_LINKS = 40  # as the kernel's own limit on symlinks followed in one lookup


def problems(path: str, what: str) -> list[str]:
    """Why root should not trust ``path`` (``what`` names it: "config file", "[idle] npu_smi")."""
    if not os.path.isabs(path):
        return [f"{what} {path}: not an absolute path"]
    out: list[str] = []
    _walk(path, what, path, out, 0)
    return list(dict.fromkeys(out))


def _walk(path: str, what: str, shown: str, out: list[str], links: int) -> None:
    parts = [p for p in path.split("/") if p]
    current = "/"
    if _judge(current, os.lstat(current), what, shown, out):
        return
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return  # the rest does not exist; its parent is trusted, so only root can make it
        except OSError as exc:
            out.append(f"{what} {shown}: cannot inspect {current}: {exc.strerror}")
            return
        if _judge(current, st, what, shown, out):
            return
        if stat.S_ISLNK(st.st_mode):
            if links >= _MAX_LINKS:
                out.append(f"{what} {shown}: too many symlinks")
                return
            try:
                target = os.readlink(current)
            except OSError as exc:
                out.append(f"{what} {shown}: cannot read symlink {current}: {exc.strerror}")
                return
            rest = "/".join(parts[i + 1:])
            resolved = os.path.normpath(os.path.join(os.path.dirname(current), target, rest))
            _walk(resolved, what, shown, out, links + 1)
            return
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            return  # a file used as a folder: the lookup fails, nothing to trust


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
        who = "group- and world-" if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH \
            else "group-" if st.st_mode & stat.S_IWGRP else "world-"
        out.append(f"{what} {where}: {who}writable (mode {stat.S_IMODE(st.st_mode):04o})")
        return True
    return False

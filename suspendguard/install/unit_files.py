"""A unit's settings as systemd reads them, under a root (``/``, or a staged tree): the unit
file, then its drop-ins, the [Service] section alone; and whether a unit is masked.

doctor checks these settings and status shows them: both read them here, so that what one
calls fixed the other shows.
"""

from __future__ import annotations

import glob
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

# The folders systemd loads units from, in its order: systemctl mask and edit write /etc,
# their --runtime forms /run.
UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/lib/systemd/system",
             "lib/systemd/system")


def service_texts(root: str, path: str, names: Sequence[str]) -> list[str]:
    """The [Service] section of the unit file at ``path``, then of its drop-ins
    (``NAME.d/*.conf`` for each of ``names``, in every unit folder; a drop-in's file name in
    an earlier folder hides it in a later one) in file-name order, as systemd applies them.
    None of them when the file is absent. A key outside the section (a drop-in without its header)
    systemd ignores."""
    text = _read(Path(root) / path.lstrip("/"))
    if text is None:
        return []
    dropins: dict[str, Path] = {}
    for folder in UNIT_DIRS:
        for name in names:
            for file in sorted(glob.glob(str(Path(root) / folder / f"{glob.escape(name)}.d"
                                             / "*.conf"))):
                dropins.setdefault(os.path.basename(file), Path(file))
    texts = [text] + [t for t in (_read(dropins[n]) for n in sorted(dropins)) if t is not None]
    return [section(t, "Service") for t in texts]


def unit_setting(root: str, path: str, key: str | tuple[str, ...], names: Sequence[str]
                 ) -> str | None:
    """``key`` (the last of the keys given, where several set it: ``TimeoutSec=`` sets
    ``TimeoutStartSec=`` too) as systemd reads it for the unit file at ``path`` and the
    drop-ins of ``names``. None when the file is absent or nothing sets it."""
    found = None
    for text in service_texts(root, path, names):
        value = setting(text, key)
        found = value if value is not None else found
    return found


def unit_list(root: str, path: str, key: str, names: Sequence[str]) -> list[str]:
    """A list setting (``ReadWritePaths=``) as systemd reads it: each assignment adds its
    words, an empty one empties it."""
    found: list[str] = []
    for text in service_texts(root, path, names):
        for line in text.splitlines():
            name, _, value = line.strip().partition("=")
            if name.strip() == key:
                found = found + _words(value) if value.strip() else []
    return found


def mask_of(root: str, name: str) -> str | None:
    """The file that masks ``name``: the first of systemd's unit folders to hold it, where
    that is a link to /dev/null or an empty file. None when nothing masks it."""
    path = first_of(root, name)
    if path is None:
        return None
    at = Path(root) / path.lstrip("/")
    try:
        masked = os.readlink(at) == "/dev/null" if at.is_symlink() else at.stat().st_size == 0
    except OSError:
        return None
    return path if masked else None


def first_of(root: str, name: str) -> str | None:
    """Where systemd finds the unit file ``name`` (as the target sees it), or None."""
    return next((f"/{d}/{name}" for d in UNIT_DIRS
                 if os.path.lexists(Path(root) / d / name)), None)


def section(text: str, name: str) -> str:
    """The lines of a unit file's ``[name]`` sections, joined."""
    keep, current = [], None
    for line in logical_lines(text):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1]
        elif current == name:
            keep.append(line)
    return "\n".join(keep)


def logical_lines(text: str) -> list[str]:
    """A unit file's lines as systemd reads them: a line that ends in a backslash goes on in
    the next (the backslash read as a space), comment lines inside it dropped."""
    out: list[str] = []
    pending: str | None = None
    for line in text.splitlines():
        if line.lstrip().startswith(("#", ";")):
            continue  # a comment, also one inside a continued line
        if line.endswith("\\"):
            pending = (pending or "") + line[:-1] + " "
            continue
        out.append((pending or "") + line)
        pending = None
    if pending is not None:
        out.append(pending)
    return out


def setting(text: str, key: str | tuple[str, ...]) -> str | None:
    """The last ``KEY=value`` of a unit file's text (of any of the keys given); None when it
    sets none."""
    keys = (key,) if isinstance(key, str) else key
    found = None
    for line in logical_lines(text):
        name, _, value = line.strip().partition("=")
        if name.strip() in keys:
            found = value.strip()
    return found


def _words(value: str) -> list[str]:
    """A list setting's words as systemd splits them: quotes group, ``%%`` is a ``%``."""
    try:
        words = shlex.split(value)
    except ValueError:  # an unclosed quote: systemd ignores the line; words are the best guess
        words = value.split()
    return [w.replace("%%", "%") for w in words]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:  # absent, a folder, a dangling link
        return None

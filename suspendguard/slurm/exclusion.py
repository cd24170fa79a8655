"""The SuspendExcNodes file slurm.conf includes: what it names, its lock, its writes by a rename.

Kept in SlurmUser's folder and written by SuspendProgram (SlurmUser) and the sync
timer (root) alike: every name made there refuses a link planted in its place.
Beside it the guard keeps its own record of the nodes it holds, each with the
reason it gave: Slurm 22.05 frees a drained node's reason when the node
registers after a power-down (every ``scontrol reconfigure`` has each slurmd
register), the DRAIN kept, and the record is what still says the drain is
the guard's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from suspendguard.config.cluster import exclude_sets
from suspendguard.slurm.remote import held_by_guard
from suspendguard.slurm.scontrol import Node, Scontrol, SlurmError
from suspendguard.system.log import ERR, INFO, WARNING

# The lock and the re-read mark are made in SlurmUser's folder by root's run too (the
# timer's): a link planted in their place must not have root create a file elsewhere.
_MARK_FLAGS = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC

EXCLUDE_HEAD = ("# Written by suspendguard slurm: the nodes its guard drained, and [slurm] "
                "exclude.\n# Included by slurm.conf; edits here are overwritten.\n")

Say = Callable[[int, str], None]


@contextlib.contextmanager
def exclusion_lock(path: Path) -> Iterator[None]:
    """The lock beside the exclusion file, held for the ``with`` block."""
    # Read-only: the timer's run (root) and SuspendProgram's (SlurmUser) share one lock file.
    with open(os.open(f"{path}.lock", _MARK_FLAGS, 0o644)) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_if_changed(path: Path, text: str, owed: Path | None = None) -> bool:
    """``text`` into ``path`` by a rename (the caller holds :func:`exclusion_lock`); False when
    it already held it. ``owed`` is made first, when given."""
    try:
        # As bytes: an edit in another encoding (a Latin-1 comment) is a change, rewritten.
        if path.read_bytes() == text.encode():
            return False
    except FileNotFoundError:
        pass
    if owed is not None:  # read-only, as the lock: root's may be there for SlurmUser's run
        os.close(os.open(owed, _MARK_FLAGS, 0o644))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            # Through the descriptor: in SlurmUser's folder the name may be a link by now.
            os.fchmod(f.fileno(), 0o644)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def read_record(path: Path) -> dict[str, str]:
    """The nodes the guard held at the last sync, each with its reason; none when the record
    is missing or not the guard's (a link is not followed: root's run reads it too)."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k: v for k, v in doc.items() if isinstance(k, str) and isinstance(v, str) and v}


def held_nodes(nodes: Sequence[Node], record: dict[str, str],
               scontrol: Scontrol, say: Say) -> dict[str, str]:
    """The nodes the guard holds, each with its reason: drained with the guard's reason, or
    drained with none while the record holds them (Slurm freed it), their reason given
    again so that ``sinfo -R`` says why and the node's health check lifts the drain as the
    guard's. A node drained by anyone else, or no longer drained, is not held."""
    held = {}
    for n in nodes:
        if n.drained and held_by_guard(n.reason):
            held[n.name] = n.reason
        elif n.drained and not n.reason and n.name in record:
            held[n.name] = record[n.name]
            try:
                scontrol.update(n.name, "DRAIN", record[n.name])
            except SlurmError as exc:
                say(ERR, f"{n.name}: its reason, dropped by Slurm, not given again: {exc}")
            else:
                say(WARNING, f"{n.name}: its reason, dropped by Slurm, given again: "
                    f"{record[n.name]}")
    return held


def exclude_names(exclude: Sequence[str]) -> list[str]:
    """``[slurm] exclude`` in the order SuspendExcNodes needs: each set with a count first,
    then the names with none, the held nodes' place. Slurm takes a count for every name
    since the count before it: ``a,n[1-4]:2`` keeps two of a and n1 to n4 up, and a, or a
    held node, written before a count may be powered down."""
    sets = [s for entry in exclude for s in exclude_sets(entry)]
    return ([f"{names}:{count}" for names, count in sets if count is not None]
            + [names for names, count in sets if count is None])


def sync_file(path: Path, exclude: Sequence[str], also: Sequence[str],
              scontrol: Scontrol, say: Say) -> bool:
    """The file made to name ``exclude``, the nodes the guard holds and ``also``, the record
    kept; slurmctld re-reads its configuration when the file changed. False when a step
    failed (said at ERR). The caller holds :func:`exclusion_lock`."""
    record_path = Path(f"{path}.held")
    try:
        held = held_nodes(scontrol.nodes(), read_record(record_path), scontrol, say)
    except SlurmError as exc:
        say(ERR, f"the drained nodes could not be listed: {exc}")
        return False
    write_if_changed(record_path, json.dumps(held, sort_keys=True) + "\n")
    names = list(dict.fromkeys([*exclude_names(exclude), *held, *also]))
    text = EXCLUDE_HEAD + (f"SuspendExcNodes={','.join(names)}\n" if names else "")
    # Owed until slurmctld re-read the file: a failed or killed re-read is asked again
    # at the next sync, which finds the file already as it should be.
    owed = Path(f"{path}.reread")
    if write_if_changed(path, text, owed) or owed.exists():
        try:
            scontrol.reconfigure()
        except SlurmError as exc:
            say(ERR, f"{exc}: SuspendExcNodes stays as slurmctld last read it")
            return False
        owed.unlink(missing_ok=True)
        say(INFO, "SuspendExcNodes now " + (",".join(names) or "empty"))
    return True

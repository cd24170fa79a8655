"""What the guard changed or learned of an owner for a drain, kept in the state folder until restore.

Restore runs in another process after resume (``suspendguard restore``),
so what it needs to put an owner back (a container's restart policy, a
transient unit's command line) is written down before the drain, one JSON
object per file, keyed by owner key. This run's own copy is kept in memory
too: a state folder that cannot be written costs a warning, not the restore
right after a veto. A record written ahead of the change it undoes is the
exception: when it cannot be written, the change is not made (the owner is
not kept down), for the restore after resume, another process, would not
find it.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from suspendguard.model import Owner, Unavailable
from suspendguard.supervise.owner import NotMade
from suspendguard.system.dbus.transient import TransientSpec, start_transient, transient_spec


class SetAside:
    """One file of records by owner key; ``warnings`` says what could not be written."""

    def __init__(self, state_dir: str | None, name: str, what: str) -> None:
        self.path = os.path.join(state_dir, name) if state_dir else None
        self.what = what
        self.warnings: list[str] = []
        self._memory: dict[str, Any] = {}

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.path or "", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, Any]) -> str:
        """"" once ``data`` is the file's (or there is no file to keep), else why not."""
        if self.path is None:
            return ""
        tmp = self.path + ".tmp"
        try:
            if not data:
                os.unlink(self.path)
                return ""
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except FileNotFoundError:
            pass  # nothing to remove
        except OSError as exc:
            with contextlib.suppress(OSError):  # a half-written copy (a full disk)
                os.unlink(tmp)
            return f"cannot record {self.what} in {self.path}: {exc.strerror}"
        return ""

    def records(self) -> dict[str, Any]:
        """Every record kept in the file now, by key (what a killed run left, too)."""
        return self._read()

    def get(self, key: str) -> Any:
        """The record kept for ``key`` (None when none), still kept."""
        saved = self._read().get(key)
        return self._memory.get(key) if saved is None else saved

    def put(self, key: str, record: Any, *, ahead: bool = False) -> str:
        """Keep ``record`` for ``key``: "" once it is in the file, else why not (in
        ``warnings`` too, and this run's copy is kept).

        ``ahead``: written ahead of the change it undoes, which the caller does not make when
        it could not be written: no copy is kept then, and the caller says why.
        """
        data = self._read()
        data[key] = record
        failed = self._write(data)
        if failed and ahead:
            return failed
        self._memory[key] = record
        if failed:
            self.warnings.append(failed)
        return failed

    def take(self, key: str) -> Any:
        """The record kept for ``key`` (None when none), no longer kept."""
        data = self._read()
        saved = data.pop(key, None)
        remembered = self._memory.pop(key, None)
        if saved is not None:
            if failed := self._write(data):
                self.warnings.append(failed)
            return saved
        return remembered


# What transient units were made of, by owner key: what restore makes again.
TRANSIENT_FILE = "transient-units.json"


class TransientUnits(SetAside):
    """Transient units (``systemd-run``), unloaded by systemd once their job ended: the
    settings each was made of, kept across the sleep in :data:`TRANSIENT_FILE` and handed
    back to ``StartTransientUnit`` (system/dbus/transient.py)."""

    def __init__(self, state_dir: str | None) -> None:
        super().__init__(state_dir, TRANSIENT_FILE, "the transient units' settings")

    def record(self, owner: Owner, address: str | None) -> str:
        """Write down how to make ``owner`` again: "", or why it is not to be kept down.

        Read before the drop-in's ``Restart=no`` and ``KillSignal=`` are in force. Settings
        that cannot be read cost a warning (the unit is kept down, and restore says it is
        gone); settings read and not written are the reason not to keep it down, for the
        restore after resume, another process, would not find them.
        """
        spec = transient_spec(owner.name, address=address)
        if isinstance(spec, Unavailable):
            self.warnings.append(
                f"{owner.name} is a transient unit whose settings could not be read "
                f"({spec.reason}): it cannot be made again after resume")
            self.take(owner.key)  # an older record would make another unit
            return ""
        failed = self.put(owner.key, spec.to_json(), ahead=True)
        return f"{failed}; restore could not make it again" if failed else ""

    def make_again(self, owner: Owner, address: str | None) -> str | Unavailable | None:
        """Make a transient unit recorded before the drain again, and start it.

        Its ActiveState once started; None when nothing was recorded for it. The record goes
        once the unit is made: a start refused keeps it for the next restore (:class:`NotMade`).
        """
        record = self.get(owner.key)
        if record is None:
            return None
        try:
            spec = TransientSpec.from_json(record)
        except (KeyError, TypeError, ValueError):
            self.take(owner.key)
            return Unavailable(f"the record of {owner.name} in {self.path} is unreadable")
        made = start_transient(owner.name, spec, address=address)
        if isinstance(made, Unavailable):
            return NotMade(made.reason)
        self.take(owner.key)
        return made

"""What the guard changed or learned of an owner for a drain, kept in the state folder until restore.

Restore runs in another process after resume (``suspendguard restore``),
so what it needs to put an owner back (a container's restart policy, a
transient unit's command line) is written down before the drain, one JSON
object per file, keyed by owner key. This run's own copy is kept in memory
too: a state folder that cannot be written costs a warning, not the restore
right after a veto.
"""

from __future__ import annotations

import json
import os
from typing import Any


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

    def _write(self, data: dict[str, Any]) -> None:
        if self.path is None:
            return
        try:
            if not data:
                os.unlink(self.path)
                return
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except FileNotFoundError:
            pass  # nothing to remove
        except OSError as exc:
            self.warnings.append(f"cannot record {self.what} in {self.path}: {exc.strerror}")

    def records(self) -> dict[str, Any]:
        """Every record kept in the file now, by key (what a killed run left, too)."""
        return self._read()

    def get(self, key: str) -> Any:
        """The record kept for ``key`` (None when none), still kept."""
        saved = self._read().get(key)
        return self._memory.get(key) if saved is None else saved

    def put(self, key: str, record: Any) -> None:
        self._memory[key] = record
        data = self._read()
        data[key] = record
        self._write(data)

    def take(self, key: str) -> Any:
        """The record kept for ``key`` (None when none), no longer kept."""
        data = self._read()
        saved = data.pop(key, None)
        remembered = self._memory.pop(key, None)
        if saved is not None:
            self._write(data)
            return saved
        return remembered

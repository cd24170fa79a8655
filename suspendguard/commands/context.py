"""What every command gets: its configuration (loaded once, on first use), where to print and read."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from suspendguard.config import Config, load
from suspendguard.errors import ConfigUntrusted, HistoryError
from suspendguard.system.log import Logger

if TYPE_CHECKING:  # SQLite is loaded by the commands that open the history, not by every one
    from suspendguard.store.history import History


class Context:
    """Where the configuration comes from, where to print, and where answers come from."""

    def __init__(self, config_arg: str | None, out: TextIO, err: TextIO,
                 environ: dict[str, str] | None = None, stdin: TextIO | None = None) -> None:
        self.config_arg = config_arg
        self.out = out
        self.err = err
        self.stdin = sys.stdin if stdin is None else stdin
        self.environ = dict(os.environ) if environ is None else environ
        self._config: Config | None = None

    def config(self, *, untrusted_ok: bool = False) -> Config:
        """The configuration; as root, one that others could change is refused.

        ``untrusted_ok``: for a command that only reports on it (its
        ``trust`` says why root may not act on it).
        """
        if self._config is None:
            self._config = load(self.config_arg, self.environ)
        if self._config.trust and not untrusted_ok:
            raise ConfigUntrusted(self._config.trust)
        return self._config


def open_history_or_say(state_dir: str, log: Logger, failed: str, *, error: bool = False
                 ) -> History | None:
    """The history, opened to write, its warnings said (a damaged file moved aside names
    the jobs it leaves stopped); None, said after ``failed``, when it cannot be opened."""
    from suspendguard.store.history import History
    try:
        history = History.open(state_dir)
    except HistoryError as exc:
        (log.error if error else log.warning)(f"{failed}: {exc}")
        return None
    for line in history.warnings:
        log.warning(line)
    return history

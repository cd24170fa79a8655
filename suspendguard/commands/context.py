"""What every command gets: its configuration (loaded once, on first use), where to print and read."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from suspendguard.config import Config, load


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

    def config(self) -> Config:
        if self._config is None:
            self._config = load(self.config_arg, self.environ)
        return self._config

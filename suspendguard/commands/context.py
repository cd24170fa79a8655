"""What every subcommand gets: its configuration (loaded once, on first use) and where to print."""

from __future__ import annotations

import os
from typing import TextIO

from suspendguard.config import Config, load


class Context:
    """Where the configuration comes from, and where to print."""

    def __init__(self, config_arg: str | None, out: TextIO, err: TextIO,
                 environ: dict[str, str] | None = None) -> None:
        self.config_arg = config_arg
        self.out = out
        self.err = err
        self.environ = dict(os.environ) if environ is None else environ
        self._config: Config | None = None

    def config(self) -> Config:
        if self._config is None:
            self._config = load(self.config_arg, self.environ)
        return self._config

"""Log lines for people and for journald.

Under systemd (JOURNAL_STREAM set) each line carries a ``<N>`` syslog
priority prefix so journald files it at the right level; on a terminal the
lines are plain, with the level spelled out for warnings and errors.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

from suspendguard.errors import OutputLost
from suspendguard.system.terminal import safe

ERR, WARNING, NOTICE, INFO, DEBUG = 3, 4, 5, 6, 7
_WORDS = {ERR: "error: ", WARNING: "warning: "}


class Logger:
    def __init__(self, stream: TextIO | None = None, environ: Mapping[str, str] | None = None,
                 quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        env = os.environ if environ is None else environ
        self.journal = bool(env.get("JOURNAL_STREAM"))
        self.quiet = quiet

    def log(self, priority: int, message: str) -> None:
        if self.quiet and priority > NOTICE:
            return
        # One line, its control characters shown as escapes: a process name is its owner's
        # to choose, and this goes to an operator's terminal.
        line = safe(" ".join(message.split("\n")))
        if self.journal:
            text = f"<{priority}>{line}\n"
        else:
            text = f"suspendguard: {_WORDS.get(priority, '')}{line}\n"
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError, OutputLost):
            pass  # a closed stderr must never change a verdict

    def error(self, message: str) -> None:
        self.log(ERR, message)

    def warning(self, message: str) -> None:
        self.log(WARNING, message)

    def notice(self, message: str) -> None:
        self.log(NOTICE, message)

    def info(self, message: str) -> None:
        self.log(INFO, message)

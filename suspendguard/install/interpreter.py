"""The units' interpreter: chosen, refused where it would not last, checked that it runs the guard.

The veto unit is ``RequiredBy=`` every sleep service: if its interpreter
goes (a virtual environment deleted, /tmp cleaned) every suspend fails. So
install refuses places that do not last, and status runs the interpreter the
installed unit names.
"""

from __future__ import annotations

import os
import pwd
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from suspendguard.config.trust import problems
from suspendguard.errors import InstallError, InstallUntrusted
from suspendguard.system import runner

# What a staged tree (--root: a package or an image build) gets by default:
# the target system's interpreter, not the builder's.
STAGED_DEFAULT = "/usr/bin/python3"
TEMPORARY = ("/tmp", "/var/tmp", "/dev/shm")
PROBE_TIMEOUT_S = 10.0
# It prints the folder the guard is imported from: root runs that code too.
PROBE = "import os, suspendguard; print(os.path.dirname(suspendguard.__file__))"
MAX_FILE_PROBLEMS = 3  # the package's files named, of those others could change


@dataclass(frozen=True, slots=True)
class Interpreter:
    """The interpreter the installed unit names, and whether it runs the guard."""

    path: str
    usable: bool | None  # None: not run (a staged tree, not this system)
    reason: str = ""  # why it is not usable
    # Why root should not run it: the interpreter, or the guard's code it
    # imports, could be changed by others (config/trust.py's rule).
    untrusted: tuple[str, ...] = ()

    def distrust(self) -> str:
        """Why root should not run it, in one line that names it; "" when root may."""
        if not self.untrusted:
            return ""
        more = len(self.untrusted) - 1
        return (self.untrusted[0] + (f" (and {more} more)" if more else "")
                + ": root runs it at every suspend, so whoever can change it runs as root")

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "usable": self.usable, "reason": self.reason or None}


def choose(python: str | None, staged: bool) -> str:
    """``--python``, else this interpreter (live) or /usr/bin/python3 (staged)."""
    if python:
        return os.path.abspath(python)
    return STAGED_DEFAULT if staged else os.path.abspath(sys.executable)


def _homes() -> set[str]:
    """Home folders of root and of people (uid 1000 and up), never the system's own."""
    homes = {"/root", "/home"}
    try:
        users = pwd.getpwall()
    except OSError:  # pragma: no cover - no passwd database
        users = []
    for user in users:
        if 1000 <= user.pw_uid < 65534 and user.pw_dir not in ("", "/", "/nonexistent"):
            homes.add(os.path.normpath(user.pw_dir))
    return homes


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def place_problem(python: str) -> str | None:
    """Why ``python`` lives somewhere an installed unit must not rely on, or None."""
    path = os.path.normpath(python)
    for folder in TEMPORARY:
        if _under(path, folder):
            return f"is under {folder} (cleaned at boot or by tmpfiles)"
    for home in sorted(_homes()):
        if _under(path, home):
            return f"is under the home directory {home} (removed with its user or venv)"
    return None


def refuse_unsafe(python: str, force: bool) -> None:
    """Raise unless ``python`` lives in a lasting place (or ``force`` says take it anyway)."""
    problem = place_problem(python)
    if problem and not force:
        raise InstallError(
            f"the units' interpreter {python} {problem}: every suspend would fail once it "
            "is gone; pass --python PATH with a system interpreter, or --force"
        )


def program(exec_start: str) -> str | None:
    """The program an ``ExecStart=`` line runs, its systemd prefixes and %-escapes undone."""
    try:
        words = shlex.split(exec_start)
    except ValueError:
        return None
    if not words:
        return None
    return words[0].lstrip("-@:+!").replace("%%", "%") or None


def probe(python: str, root: str = "/") -> Interpreter:
    """Whether ``python`` exists, runs, and imports the guard (run only for the live system)."""
    if os.path.normpath(root) != "/":
        return Interpreter(python, None)  # a staged tree names the target's interpreter
    if not os.path.lexists(python):
        return Interpreter(python, False, "is missing")
    if not os.path.exists(python):
        return Interpreter(python, False, "is a broken link (its target is gone)")
    if not os.access(python, os.X_OK):
        return Interpreter(python, False, "is not executable")
    result = runner.run((python, "-I", "-c", PROBE), PROBE_TIMEOUT_S)
    if result.ok:
        package = result.stdout.strip().splitlines()[-1:] or [""]
        return Interpreter(python, True, untrusted=untrusted(python, package[0]))
    err = result.stderr.strip().splitlines()
    why = err[-1] if err and result.returncode else result.describe_failure()
    return Interpreter(python, False, f"cannot import suspendguard ({why[:200]})")


def untrusted(python: str, package: str) -> tuple[str, ...]:
    """Why root should not run ``python`` and the guard's ``package`` folder it imports:
    a path of either that a user other than root could change."""
    out = problems(python, "the units' interpreter")
    if package:
        code = f"the units' interpreter {python} imports the guard's code"
        found = problems(package, code)
        if not found:  # a trusted folder may still hold a file others may write
            for path in sorted(Path(package).rglob("*.py")):
                found += problems(str(path), code)
                if len(found) >= MAX_FILE_PROBLEMS:
                    break
        out += found
    return tuple(dict.fromkeys(out))


def refuse_untrusted(found: Interpreter, force: bool, err: TextIO) -> None:
    """Refuse (exit 4, as a configuration root may not trust) what others could change of
    what the units run as root at every suspend; with ``force``, only say so on ``err``."""
    if not found.untrusted:
        return
    line = (f"{found.distrust()}; install the guard into an interpreter only root can change "
            "(root's pip, a system package)")
    if not force:
        raise InstallUntrusted(f"{line}, or pass --force")
    err.write(f"suspendguard: install: warning: {line}\n")

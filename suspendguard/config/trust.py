"""What a configuration makes root execute, source, load or write, and whether root may trust it.

Run as root, the guard signals every holder and runs the programs the
configuration names, so a file anyone else can change must not steer it.
:func:`untrusted` lists the problems of the file itself and of every
program path it names (system/trust.py has the rule); the caller refuses
to act on a configuration with any. :func:`state_dir_problem` is the check
of ``[state] dir``, where root creates and writes the history.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from suspendguard.config.effective import Config
from suspendguard.system import trust

# Folders that hold the system, other programs' state or everyone's files:
# never the guard's state folder (it would chmod and write files there).
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
    "/usr", "/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/sbin", "/usr/share",
    "/var", "/var/cache", "/var/lib", "/var/log", "/var/run", "/var/spool", "/var/tmp",
})

# The [idle] keys that name something root executes, sources or loads.
PROGRAM_KEYS = ("npu_smi", "nvidia_smi", "ascend_env", "dcmi_library")
# The [resume] keys that name something root executes or loads after resume.
RESUME_PROGRAM_KEYS = ("modprobe", "cuda_library")


def untrusted(config: Config, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Every reason root should not act on ``config`` (empty: it may)."""
    out: list[str] = []
    if config.path is not None:
        out += trust.problems(os.path.abspath(config.path), "configuration file")
    programs = [("idle", key) for key in PROGRAM_KEYS]
    programs += [("resume", key) for key in RESUME_PROGRAM_KEYS]
    for section, key in programs:
        value: str = getattr(getattr(config, section), key)
        what = f"[{section}] {key}"
        if not value or (key == "cuda_library" and "/" not in value):
            # The built-in default places, not the configuration's choice; or a
            # library name, which the loader looks up in the system's own
            # folders, never on PATH.
            continue
        if "/" in value:
            out += trust.problems(os.path.abspath(value), what)
        else:
            out += _on_path(value, what, environ.get("PATH", os.defpath))
    out += trust.problems(config.state.dir, "[state] dir")
    return tuple(dict.fromkeys(out))


def _on_path(name: str, what: str, path: str) -> list[str]:
    """A bare command name: every PATH folder searched before (and holding) it must be trusted."""
    out: list[str] = []
    for folder in path.split(os.pathsep):
        if not folder or not os.path.isabs(folder):
            out.append(f"{what} {name}: PATH holds a relative folder {folder or '(empty)'!r}")
            continue
        candidate = os.path.join(folder, name)
        out += trust.problems(candidate, what)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            break
    return out


def state_dir_problem(directory: str) -> str | None:
    """Why ``[state] dir`` cannot be the guard's state folder (None: it can)."""
    normal = os.path.normpath(directory)
    resolved = os.path.realpath(directory)
    for candidate in (normal, resolved):
        if candidate in SYSTEM_DIRS:
            return f"a folder of its own such as /var/lib/suspendguard, not the system folder {candidate}"
    return None

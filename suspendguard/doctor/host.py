"""The files the preflight reads, each under one root: the host's own (/) or a fixture tree."""

from __future__ import annotations

import glob
import os
import pwd
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from suspendguard.install import unit_files
from suspendguard.install.unit_files import UNIT_DIRS
from suspendguard.model import Unavailable
from suspendguard.system import runner

MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d")
# logind.conf and its drop-ins, in the order systemd reads them (the last one wins).
LOGIND_CONF = ("etc/systemd/logind.conf",)
LOGIND_DROPINS = ("usr/lib/systemd/logind.conf.d", "run/systemd/logind.conf.d",
                  "etc/systemd/logind.conf.d")
# The module's options: Debian's packaged driver loads it as nvidia-current (modprobe reads
# a dash and an underscore in a module's name alike).
_OPTION = re.compile(r"^\s*options\s+nvidia(?:[-_]current)?\s+(.*)$")


@dataclass(frozen=True, slots=True)
class Host:
    root: str = "/"

    def path(self, relative: str) -> Path:
        return Path(self.root) / relative.lstrip("/")

    def read(self, relative: str) -> str | None:
        try:
            return self.path(relative).read_text(errors="replace")
        except OSError:
            return None

    def exists(self, relative: str) -> bool:
        return os.path.lexists(self.path(relative))

    def knows_user(self, name: str) -> bool:
        """Whether a user of that name is known: through NSS on this host (LDAP, sssd), from
        ``etc/passwd`` under another root."""
        if self.root == "/":
            try:
                pwd.getpwnam(name)
            except (KeyError, ValueError):  # ValueError: a NUL in the name, no user's
                return False
            return True
        return any(line.split(":", 1)[0] == name
                   for line in (self.read("etc/passwd") or "").splitlines())

    def nvidia_param(self, name: str) -> tuple[str | None, str]:
        """(value, where it was read) of the nvidia module's NVreg_``name``.

        The loaded module's own value (/proc/driver/nvidia/params) first; else
        the last ``options nvidia NVreg_name=`` of the modprobe.d files.
        """
        params = self.read("proc/driver/nvidia/params")
        if params is not None:
            for line in params.splitlines():
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip().strip('"'), "/proc/driver/nvidia/params"
        found: tuple[str | None, str] = (None, "")
        for folder in MODPROBE_DIRS:
            for file in sorted(glob.glob(str(self.path(folder) / "*.conf"))):
                try:
                    text = Path(file).read_text(errors="replace")
                except OSError:  # a dangling link, a folder, a file root alone may read
                    continue
                for line in text.splitlines():
                    m = _OPTION.match(line)
                    if not m:
                        continue
                    for option in m.group(1).split():
                        key, _, value = option.partition("=")
                        if key == f"NVreg_{name}":
                            found = (value.strip('"'), "/" + os.path.relpath(file, self.root))
        return found

    def enabled(self, unit: str) -> bool:
        """Some target wants or requires ``unit`` (a link made by systemctl enable)."""
        for folder in UNIT_DIRS:
            for kind in ("wants", "requires"):
                if glob.glob(str(self.path(folder) / f"*.{kind}" / unit)):
                    return True
        return False

    def unit_files(self) -> dict[str, str]:
        """Every unit file by name, the first of the unit folders winning, as systemd reads them."""
        out: dict[str, str] = {}
        for folder in UNIT_DIRS:
            for file in sorted(glob.glob(str(self.path(folder) / "*.service"))):
                name = os.path.basename(file)
                if name in out or os.path.islink(file):
                    continue
                try:
                    out[name] = Path(file).read_text(errors="replace")
                except OSError:
                    continue
        return out

    def unit_file(self, unit: str) -> str | None:
        for folder in UNIT_DIRS:
            text = self.read(f"{folder}/{unit}")
            if text is not None:
                return text
        return None

    def unit_setting(self, path: str, key: str | tuple[str, ...], names: Sequence[str]
                     ) -> str | None:
        return unit_files.unit_setting(self.root, path, key, names)

    def unit_list(self, path: str, key: str, names: Sequence[str]) -> list[str]:
        return unit_files.unit_list(self.root, path, key, names)

    def logind_settings(self, key: str) -> list[tuple[str, str]]:
        """(file, value) for each file that sets ``key`` in [Login], in the order read."""
        files = [self.path(f) for f in LOGIND_CONF]
        for folder in LOGIND_DROPINS:
            files += sorted(Path(p) for p in glob.glob(str(self.path(folder) / "*.conf")))
        out = []
        for file in files:
            try:
                text = file.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                name, _, value = line.strip().partition("=")
                if name.strip() == key and not line.lstrip().startswith(("#", ";")):
                    out.append(("/" + os.path.relpath(file, self.root), value.strip()))
        return out

    def systemd_version(self) -> int | None:
        """From the name of systemd's shared library (libsystemd-shared-NNN.so)."""
        for folder in ("usr/lib/systemd", "usr/lib/*/systemd", "lib/systemd", "usr/lib64/systemd"):
            for file in glob.glob(str(self.path(folder) / "libsystemd-shared-*.so")):
                m = re.search(r"libsystemd-shared-(\d+)", file)
                if m:
                    return int(m.group(1))
        return None

    def meminfo(self) -> dict[str, int]:
        """/proc/meminfo in KiB."""
        out = {}
        for line in (self.read("proc/meminfo") or "").splitlines():
            key, _, rest = line.partition(":")
            figure = rest.split()
            if figure and figure[0].isdigit():
                out[key.strip()] = int(figure[0])
        return out

    def free_bytes(self, relative: str) -> int | None:
        try:
            st = os.statvfs(self.path(relative))
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def process_names(self) -> set[str]:
        names = set()
        for comm in glob.glob(str(self.path("proc") / "[0-9]*" / "comm")):
            try:
                names.add(Path(comm).read_text(errors="replace").strip())
            except OSError:
                continue
        return names


def timespan_s(value: str) -> float | Unavailable | None:
    """A unit file's time span (``120``, ``1min 30s``) in seconds, as systemd's own parser
    (``systemd-analyze timespan``) reads it; None for ``infinity``."""
    result = runner.run(["systemd-analyze", "timespan", value], 10.0)
    if not result.ok:
        return Unavailable(result.stderr.strip() or result.describe_failure())
    for line in result.stdout.splitlines():
        label, _, number = line.strip().partition(":")
        if label in ("μs", "us") and number.strip().isdigit():
            usec = int(number)
            return None if usec == (1 << 64) - 1 else usec / 1e6
    return Unavailable(f"systemd-analyze timespan {value!r}: no μs line in its answer")

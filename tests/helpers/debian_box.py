"""A fresh Debian 12 tree (mmdebstrap), booted with systemd-nspawn, for package tests.

    tree = debian_tree(cache_dir)
    with DebianBox(tree, binds_ro={"/srv/x": "/mnt/x"}) as box:
        box.run("apt-get", "install", "-y", "/mnt/x/pkg.deb")

Where tests/systemd_harness.py boots this machine's own /usr, this boots a
tree that holds nothing but Debian's packages: what a new user's host holds.
The same safety applies (the base class proves /sys/power inside is the
plain folder made here before anything can ask for a sleep). The tree is
mounted read-only with a tmpfs overlay on top (``--volatile=overlay``), so
whatever a test installs or removes inside is gone at close and one cached
tree serves every test and every run.

The container has no network (``--private-network``): every package a test
installs inside must be in the tree already or come from a bound local file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from helpers.systemd_harness import Container

SUITE = "bookworm"
# systemd + logind + dbus for a real boot; the rest: the package's Depends,
# so that the package installs with no network.
PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-dbus-next",
            "python3-prometheus-client")
MAX_AGE_S = 7 * 24 * 3600  # then rebuilt: security updates reach the tree


def tree_key(suite: str = SUITE, packages: Sequence[str] = PACKAGES) -> str:
    return hashlib.sha256(" ".join([suite, *sorted(packages)]).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def debian_tree(cache_dir: Path, suite: str = SUITE, packages: Sequence[str] = PACKAGES,
                timeout: float = 600.0) -> Path:
    """A minbase tree of ``suite`` with ``packages``, built once into ``cache_dir``.

    Built under a temporary name and renamed when complete, under a lock: a
    failed or concurrent build never leaves a half tree that looks ready.
    """
    name = f"debian-{suite}-{tree_key(suite, packages)}"
    tree = cache_dir / name
    done = cache_dir / f"{name}.done"  # outside the tree: the tree stays Debian's alone
    with _locked(cache_dir / f"{name}.lock"):
        if tree.is_dir() and done.exists() and time.time() - done.stat().st_mtime < MAX_AGE_S:
            return tree
        partial = cache_dir / f"{name}.partial"
        for stale in (partial, tree):
            if stale.exists():
                shutil.rmtree(stale)
        done.unlink(missing_ok=True)
        result = subprocess.run(
            ["mmdebstrap", "--variant=minbase", "--mode=root", "--quiet",
             "--include=" + ",".join(packages), suite, str(partial)],
            capture_output=True, text=True, timeout=timeout,
        )
        if result.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise RuntimeError(f"mmdebstrap failed ({result.returncode}): {result.stderr[-3000:]}")
        partial.rename(tree)
        done.touch()
    return tree


class DebianBox(Container):
    """The harness's container, booting ``tree`` instead of this machine's /usr."""

    python = "/usr/bin/python3"  # the tree's own: the checkout's venv is not bound in

    def __init__(self, tree: Path, binds_ro: Mapping[str, str] | None = None,
                 boot_timeout: float = 90.0) -> None:
        super().__init__(tree, boot_timeout=boot_timeout)
        self.tree = tree.resolve()
        self.binds_ro = [f"{src}:{dst}" for src, dst in (binds_ro or {}).items()]

    def command_line(self) -> list[str]:
        argv = [
            "systemd-nspawn", "--quiet", f"--directory={self.tree}", "--volatile=overlay",
            "--private-network", "--boot", "--register=no", "--keep-unit", "--console=passive",
            f"--machine={self.name}",
            f"--bind={self.power}:/sys/power",
        ]
        argv += [f"--bind-ro={bind}" for bind in self.binds_ro]
        return [*argv, "--", "systemd.firstboot=off"]

    def suspendguard(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The command the package installed, as an operator runs it."""
        return self.run("suspendguard", *args, check=check)

    def files(self, exclude: Sequence[str] = ()) -> set[str]:
        """Every path on the root file system inside (``find / -xdev``), minus ``exclude`` prefixes."""
        out = self.run("find", "/", "-xdev", timeout=120).stdout.splitlines()
        return {p for p in out
                if not any(p == e or p.startswith(e.rstrip("/") + "/") for e in exclude)}


def unavailable_reason() -> str | None:
    """Why a fresh Debian box cannot be built and booted here, or None."""
    from helpers.systemd_harness import unavailable_reason as harness_reason

    reason = harness_reason()
    if reason is not None:
        return reason
    if shutil.which("mmdebstrap") is None:
        return "mmdebstrap is not installed (package mmdebstrap)"
    return None

"""Boot a real systemd and logind in a container, with a fake /sys/power.

    with Container(repo) as box:
        box.run("systemctl", "suspend")

The container is this machine's own /usr under a volatile root
(``systemd-nspawn --directory=/ --volatile=yes``), with no network (or,
given ``network_namespace``, the one the caller made), and these bound in:

- a plain folder at /sys/power holding ``state`` ("freeze mem disk"),
  ``mem_sleep`` and ``disk``: systemd-sleep writes "mem" (or "disk") into the
  plain file instead of putting the machine to sleep. Before anything can
  ask for a sleep, :meth:`Container.boot` proves from inside that /sys/power
  is this folder (same inode, not sysfs, a random token readable) and
  refuses to go on otherwise: the container shares the host's kernel.
- a writable temporary folder at /usr/lib/systemd/system-sleep (the only
  folder systemd-sleep reads hooks from; /usr itself is read-only there);
- the checkout, its virtual environment and the interpreter behind it,
  read-only at the same paths.

Units the host's packages enable that a test container must not wait for or
run (MASKED: the wait-online services, which a container without network
would wait 120 s for, and container engines) are masked with ``systemd.mask=``
on the container's systemd command line. When the boot does not finish in
time, the error carries the container's own account: its job queue, its
journal and its console.

Commands run inside with ``nsenter -t PID -a`` (PID: the container's
systemd as the host sees it). :meth:`Container.close` always stops it: a
clean poweroff first, then SIGKILL to the container's init, which ends
every process of its PID namespace.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import pytest

from helpers import TESTS
from helpers.wait import wait_for

FAKE_POWER = {
    "state": "freeze mem disk\n",
    "mem_sleep": "s2idle [deep]\n",
    "disk": "[platform] shutdown reboot suspend\n",
    # systemd-sleep writes the resume device here before it hibernates
    "resume": "0:0\n",
    "resume_offset": "0\n",
}
FAKE_SWAP_DEVICE = "/dev/suspendguard-test-swap"
TOKEN_FILE = ".suspendguard-harness-token"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOLDER = str(TESTS / "helpers" / "holder.py")  # the checkout is bound at its real path
# Enabled on hosts with podman, Docker or NetworkManager installed: the
# wait-online services hold "starting" for up to 120 s in a container with no
# network (network-online.target pulls them in); the engines must not start
# in a copy of the host anyway. Masking a unit that does not exist is harmless.
MASKED = (
    "systemd-networkd-wait-online.service",
    "systemd-networkd-wait-online@.service",
    "NetworkManager-wait-online.service",
    "ifupdown-wait-online.service",
    "systemd-time-wait-sync.service",
    "docker.service", "docker.socket", "containerd.service",
    "podman.service", "podman.socket", "podman-restart.service",
    "podman-auto-update.service", "podman-auto-update.timer",
    "podman-clean-transient.service", "podman-kube@.service",
    # Enabled by their packages' presets on hosts with Slurm, MUNGE or an SSH
    # server installed (tools/test installs them for the Slurm test): no other
    # test container may run a copy of the host's cluster daemons or sshd.
    # tests/helpers/slurm_cluster.py boots with its own list, without them.
    "munge.service", "ssh.service", "ssh.socket", "sshd.service",
    "slurmd.service", "slurmctld.service",
)


PAM_SYSTEMD_USER = """auth required pam_permit.so
account required pam_permit.so
session required pam_permit.so
session optional pam_systemd.so
"""


class HarnessError(RuntimeError):
    """The container could not be booted, proven safe, or driven."""


def unavailable_reason() -> str | None:
    """Why the container tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn, nsenter)"
    for tool in ("systemd-nspawn", "nsenter"):
        if shutil.which(tool) is None:
            package = "systemd-container" if tool == "systemd-nspawn" else "util-linux"
            return f"{tool} is not installed (package {package})"
    if not Path("/usr/lib/systemd/systemd").exists() and not Path("/lib/systemd/systemd").exists():
        return "systemd is not installed"
    return None


def container_marks() -> list[pytest.MarkDecorator]:
    """A container test module's marks: systemd, root, and skipped where it cannot run."""
    reason = unavailable_reason()
    return [pytest.mark.systemd, pytest.mark.root,
            pytest.mark.skipif(reason is not None, reason=str(reason))]


def _binds_for_python(repo: Path) -> list[str]:
    """The checkout, the venv and the interpreter's prefix, minus what /usr already gives."""
    wanted = [repo.resolve(), Path(sys.prefix), Path(sys.base_prefix),
              Path(os.path.realpath(sys.executable)).parent.parent]
    out: list[str] = []
    for path in sorted({str(p) for p in wanted}, key=len):
        if path == "/" or path == "/usr" or path.startswith("/usr/"):
            continue
        if any(path == o or path.startswith(o + "/") for o in out):
            continue
        out.append(path)
    return out


Booting = TypeVar("Booting", bound="BootsOnEnter")


class BootsOnEnter:
    """``with X(...) as x``: booted on entry (closed again if the boot fails), closed on exit."""

    def boot(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: Booting) -> Booting:
        try:
            self.boot()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class Container(BootsOnEnter):
    python = sys.executable  # the jobs' interpreter: the checkout's own, bound in

    def __init__(self, repo: Path, extra_ro: Iterable[str] = (), boot_timeout: float = 90.0,
                 masked: Iterable[str] = MASKED, init_args: Iterable[str] = (),
                 network_namespace: str | None = None) -> None:
        self.repo = repo.resolve()
        self.workdir = Path(tempfile.mkdtemp(prefix="suspendguard-nspawn-"))
        self.power = self.workdir / "power"
        self.hooks = self.workdir / "system-sleep"
        self.log_path = self.workdir / "nspawn.log"
        self.name = f"sg-test-{os.getpid()}-{secrets.token_hex(2)}"
        self.binds_ro = _binds_for_python(self.repo) + list(extra_ro)
        self.boot_timeout = boot_timeout
        self.masked = list(masked)
        self.init_args = list(init_args)
        # None: a private network of its own (only lo); a name: the network namespace
        # /run/netns/NAME (ip netns add), which several containers may share.
        self.network_namespace = network_namespace
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.token = secrets.token_hex(16)
        self.booted = False
        self.jobs: list[str] = []

    # -- lifecycle ---------------------------------------------------------

    def command_line(self) -> list[str]:
        network = ("--private-network" if self.network_namespace is None
                   else f"--network-namespace-path=/run/netns/{self.network_namespace}")
        argv = [
            "systemd-nspawn", "--quiet", "--directory=/", "--volatile=yes", network,
            "--boot", "--register=no", "--keep-unit", "--console=passive",
            f"--machine={self.name}",
            f"--bind={self.power}:/sys/power",
            f"--bind={self.hooks}:/usr/lib/systemd/system-sleep",
        ]
        argv += [f"--bind-ro={path}" for path in self.binds_ro]
        return [*argv, "--", "systemd.firstboot=off",
                *(f"systemd.mask={unit}" for unit in self.masked), *self.init_args]

    def boot(self) -> None:
        self.power.mkdir()
        self.hooks.mkdir()
        self.reset_power()
        (self.power / TOKEN_FILE).write_text(self.token)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(self.command_line(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        self.pid = self._find_init(deadline=time.monotonic() + 30)
        self._prove_fake_power()
        self._wait_booted(deadline=time.monotonic() + self.boot_timeout)
        self.booted = True

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            if self.booted:
                proc.send_signal(signal.SIGTERM)  # nspawn: a clean poweroff of the container
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=15)
            if proc.poll() is None:
                if self.pid is not None:
                    _kill(self.pid)  # init dies: every process of its namespace dies
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                _kill(proc.pid)
                proc.wait(timeout=10)
        self.booted = False
        self.pid = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _find_init(self, deadline: float) -> int:
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(f"systemd-nspawn exited ({self.proc.returncode}): {self.log_tail()}")
            for pid in _descendants(self.proc.pid):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                nspid = re.search(r"^NSpid:\s+(.*)$", status, re.M)
                if nspid and nspid.group(1).split()[-1] == "1" and len(nspid.group(1).split()) > 1:
                    return pid
            time.sleep(0.05)
        raise HarnessError(f"no init process appeared in the container: {self.log_tail()}")

    def _prove_fake_power(self) -> None:
        """Refuse to go on unless /sys/power inside is the plain folder made here."""
        assert self.pid is not None
        want = os.stat(self.power / "state")
        deadline = time.monotonic() + 20
        while True:
            got = self.run("stat", "-c", "%d %i", "/sys/power/state", check=False)
            if got.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # the container's /sys may not be mounted yet
        fs = self.run("stat", "-f", "-c", "%T", "/sys/power/state", check=False)
        token = self.run("cat", f"/sys/power/{TOKEN_FILE}", check=False)
        if (got.stdout.split() == [str(want.st_dev), str(want.st_ino)]
                and fs.stdout.strip() not in ("sysfs", "") and token.stdout == self.token):
            return
        raise HarnessError(
            "refusing to run: /sys/power inside the container is not the fake folder "
            f"(stat {got.stdout.strip()!r}, fs {fs.stdout.strip()!r}, want "
            f"{want.st_dev} {want.st_ino}); nothing may ask this kernel to sleep"
        )

    def _wait_booted(self, deadline: float) -> None:
        state = ""
        while time.monotonic() < deadline:
            state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise HarnessError(f"the container did not boot within {self.boot_timeout:g} s "
                           f"(state {state!r}):\n{self.boot_account()}")

    def boot_account(self) -> str:
        """What the container says about its boot: job queue, journal, console."""
        parts = []
        for title, argv in (
            ("jobs", ["systemctl", "list-jobs", "--no-pager"]),
            ("journal", ["journalctl", "-b", "--no-pager", "-o", "short-monotonic", "-n", "60"]),
        ):
            try:
                got = self.run(*argv, check=False, timeout=10)
                text = (got.stdout + got.stderr).strip()
            except (HarnessError, subprocess.TimeoutExpired) as e:
                text = f"(not reachable: {e})"
            parts.append(f"--- {title} ({' '.join(argv)}):\n{text or '(empty)'}")
        console = self.log_tail(40, sep="\n")
        parts.append(f"--- console ({self.log_path.name}):\n{console or '(empty)'}")
        return "\n".join(parts)

    def log_tail(self, lines: int = 20, sep: str = " | ") -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return sep.join(text.splitlines()[-lines:])

    # -- commands inside -------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 60.0,
            input: str | None = None, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
        if self.pid is None:
            raise HarnessError("the container is not running")
        environ = {"PATH": PATH, "LANG": "C.UTF-8", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0",
                   **(env or {})}
        result = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-a", "env", "-i",
             *(f"{k}={v}" for k, v in environ.items()), *argv],
            input=input, capture_output=True, text=True, timeout=timeout,
        )
        if check and result.returncode != 0:
            raise HarnessError(
                f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()[-2000:]}"
            )
        return result

    def sh(self, script: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return self.run("sh", "-c", script, **kwargs)  # type: ignore[arg-type]

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        self.run("sh", "-c", f'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod {mode:o} "$1"',
                 "sh", path, input=text)

    def suspendguard(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The guard inside, from the test's own venv (bound read-only at its path).

        Tests pass ``install --force``: that venv lives in the checkout, which
        CI may clone under /tmp, where install rightly refuses an interpreter.
        """
        return self.run(sys.executable, "-m", "suspendguard", *args, check=check)

    # -- the journal ------------------------------------------------------------

    def cursor(self) -> str:
        out = self.run("journalctl", "-n", "0", "--show-cursor", "--no-pager").stdout
        match = re.search(r"^-- cursor: (.*)$", out, re.M)
        if not match:
            raise HarnessError(f"no journal cursor in {out!r}")
        return match.group(1)

    def journal(self, cursor: str, *args: str) -> str:
        return self.run("journalctl", f"--after-cursor={cursor}", "--no-pager", "-o", "short",
                        *args).stdout

    def wait_journal(self, cursor: str, pattern: str, timeout: float = 60.0,
                     args: Sequence[str] = ()) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.journal(cursor, *args)
            if re.search(pattern, text):
                return text
            if time.monotonic() > deadline:
                raise HarnessError(f"no journal line matching {pattern!r} within {timeout} s:\n"
                                   + text[-4000:])
            time.sleep(0.2)

    # -- sleeping ---------------------------------------------------------------

    def reset_power(self) -> None:
        for name, text in FAKE_POWER.items():
            (self.power / name).write_text(text)

    def power_state(self) -> str:
        return (self.power / "state").read_text()

    def suspend(self, verb: str = "suspend", timeout: float = 150.0) -> str:
        """``systemctl VERB`` through logind; the journal of the whole attempt.

        systemctl returns at once (logind works asynchronously), so this waits
        for logind to say the operation finished, then for the job queue to empty.
        """
        cursor = self.cursor()
        self.run("systemctl", verb)
        self.wait_journal(cursor, r"systemd-logind\[\d+\]: Operation '[\w-]+' finished",
                          timeout=timeout)
        self.wait_idle()
        return self.journal(cursor)

    def wait_idle(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "No jobs running" not in self.run("systemctl", "list-jobs").stdout:
            if time.monotonic() > deadline:
                raise HarnessError("systemd still has jobs queued")
            time.sleep(0.1)

    def fake_swap(self) -> None:
        """Make logind and systemd-sleep believe in a swap partition, for hibernate.

        A real swapon would change the host's kernel, which the container
        shares. Instead a block node nothing uses and a /proc/swaps listing
        it are bound (BindReadOnlyPaths=) into systemd-logind and
        systemd-hibernate only; systemd-sleep then writes the node's number
        into the fake /sys/power/resume and "disk" into the fake state.
        """
        swaps = ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                 f"{FAKE_SWAP_DEVICE}\tpartition\t16777212\t0\t-2\n")
        self.sh(f"test -b {FAKE_SWAP_DEVICE} || mknod {FAKE_SWAP_DEVICE} b 7 200")
        self.write("/run/suspendguard-test/swaps", swaps)
        for unit in ("systemd-logind", "systemd-hibernate", "systemd-hybrid-sleep",
                     "systemd-suspend-then-hibernate"):
            self.write(f"/run/systemd/system/{unit}.service.d/fake-swap.conf",
                       "[Service]\nBindReadOnlyPaths=/run/suspendguard-test/swaps:/proc/swaps\n")
        self.run("systemctl", "daemon-reload")
        self.run("systemctl", "restart", "systemd-logind")
        deadline = time.monotonic() + 20
        while self.can("Hibernate") != "yes":
            if time.monotonic() > deadline:
                raise HarnessError(f"logind still says CanHibernate {self.can('Hibernate')!r}")
            time.sleep(0.2)

    def can(self, what: str) -> str:
        """logind's CanSuspend / CanHibernate answer ("yes", "na", ...)."""
        out = self.run("busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
                       "org.freedesktop.login1.Manager", f"Can{what}", check=False).stdout
        return out.strip().removeprefix("s ").strip('"')

    # -- jobs inside ------------------------------------------------------------

    def start_job(self, unit: str, argv: Sequence[str], ready: str = "ready",
                  timeout: float = 30.0) -> int:
        """A transient system service; its main pid once it printed ``ready``."""
        cursor = self.cursor()
        self.jobs.append(unit)
        self.run("systemd-run", f"--unit={unit}", "--service-type=simple", "--", *argv)
        self.wait_journal(cursor, rf"\b{re.escape(ready)}\b", timeout=timeout,
                          args=("-u", unit, "-o", "cat"))
        return int(self.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout)

    def lingering_user(self, name: str, uid: int, gid: int = 100) -> None:
        """A user whose own manager (user@UID.service) runs with no login, once."""
        if self.run("id", name, check=False).returncode == 0:
            return
        # Under --volatile=yes the container's /etc/pam.d is empty and
        # user@.service fails with 224/PAM; pam_systemd sets the manager's
        # XDG_RUNTIME_DIR.
        self.write("/etc/pam.d/systemd-user", PAM_SYSTEMD_USER)
        self.run("useradd", "-m", "-u", str(uid), "-g", str(gid), name)
        self.run("loginctl", "enable-linger", name)
        deadline = time.monotonic() + 15
        while not self.unit_active(f"user@{uid}.service"):
            if time.monotonic() > deadline:
                raise HarnessError(f"user@{uid}.service did not start: " + self.run(
                    "journalctl", "-u", f"user@{uid}.service", "-o", "cat",
                    check=False).stdout[-2000:])
            time.sleep(0.1)

    def as_user(self, uid: int, *argv: str, gid: int = 100,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        """``argv`` as the user, in its manager's environment (``systemctl --user`` works)."""
        return self.run("setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "env",
                        f"XDG_RUNTIME_DIR=/run/user/{uid}", *argv, check=check)

    def unit_active(self, unit: str) -> bool:
        return self.run("systemctl", "is-active", unit, check=False).stdout.strip() == "active"

    def wait_active(self, unit: str, timeout: float = 15.0) -> bool:
        return wait_for(lambda: self.unit_active(unit), timeout, interval=0.1)

    # -- a test's own setting ---------------------------------------------------

    def make_node(self, node: str, rdev: str, *dirs: str) -> None:
        """The device node ``node`` (rdev "MAJOR MINOR", mode 666), its folder and ``dirs``."""
        self.sh(f"mkdir -p {' '.join([str(Path(node).parent), *dirs])} && "
                f"mknod -m 666 {node} c {rdev}")

    def assert_unheld(self, path: str) -> None:
        """Nothing in the container holds ``path`` (the host node of a test node's number)."""
        held = self.sh(f"ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c ' -> {path}$' || :")
        assert held.stdout.strip() == "0", f"something in the container holds {path}"

    def install(self, config: str) -> subprocess.CompletedProcess[str]:
        """``config`` as the guard's config, then ``suspendguard install --force``."""
        self.write("/etc/suspendguard/config.toml", config)
        result = self.suspendguard("install", "--force")
        assert "enabled: suspendguard@suspend.service" in result.stdout, result.stdout
        return result

    def add_hook(self, name: str, text: str) -> None:
        """A system-sleep hook, run by systemd-sleep beside the guard's."""
        hook = self.hooks / name
        hook.write_text(text)
        hook.chmod(0o755)

    def start_holder(self, name: str, mode: str, *, node: str, marker: str,
                     holder: str = HOLDER) -> int:
        """helpers/holder.py holding ``node`` as the job sg-test-NAME.service; its pid once ready."""
        return self.start_job(f"sg-test-{name}.service",
                              [self.python, holder, "--node", node, "--mode", mode,
                               "--delay", "0.2", "--marker", marker])

    @contextlib.contextmanager
    def cleaned(self, *files: str) -> Iterator[Container]:
        """A test's container: an untouched /sys/power and no ``files`` (markers, logs) before
        it; its jobs stopped and /sys/power reset after it."""
        self.reset_power()
        if files:
            self.sh(f"rm -f {' '.join(files)}")
        yield self
        self.stop_jobs()
        self.reset_power()

    def stop_jobs(self) -> None:
        """Stop every job start_job started (SIGTERM, which even a deaf job obeys)."""
        jobs, self.jobs = self.jobs, []
        for unit in jobs:
            self.run("systemctl", "stop", unit, check=False)
            self.run("systemctl", "reset-failed", unit, check=False)


class Boot:
    """Boots a test module's containers; each stops when ``stack`` closes (the module's end)."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack = stack

    def __call__(self, node: str, rdev: str, *dirs: str, config: str | None = None,
                 unheld: str | None = None, extra_ro: Iterable[str] = ()) -> Container:
        """A booted container with the test node ``node`` (rdev "MAJOR MINOR") and the
        folders ``dirs`` made; ``unheld``: the host node of that number, which nothing in
        the container may hold; ``config``: the guard's config, installed."""
        container = self.stack.enter_context(Container(TESTS.parent, extra_ro=extra_ro))
        container.make_node(node, rdev, *dirs)
        if unheld is not None:
            container.assert_unheld(unheld)
        if config is not None:
            container.install(config)
        return container


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in children:
                out.append(int(child))
                todo.append(int(child))
    return out


def _kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def guard_config(node: str, *, state_dir: str | None = None, timeout_s: float = 5.0,
                 deadline_s: float | None = 20.0, log_dir: str | None = None) -> str:
    """The guard's config for a container test: one test node, no idle backends."""
    lines = ["[devices]", "families = []", f'nodes = ["{node}"]', "",
             "[idle]", "backends = []", "",
             "[drain]", f"timeout_s = {timeout_s:.1f}"]
    if deadline_s is not None:
        lines.append(f"deadline_s = {deadline_s:.1f}")
    if log_dir is not None:
        lines += ["", "[logs]", f'paths = ["{log_dir}/**"]']
    if state_dir is not None:
        lines += ["", "[state]", f'dir = "{state_dir}"']
    return "\n".join(lines) + "\n"


def at_sleep_hook(node: str, seen: str, report: str = "") -> str:
    """A system-sleep hook that, at ``pre``, appends ``held=N`` (how many fds hold
    ``node`` just before the state is written) and then ``report``'s lines
    (shell) to ``seen``."""
    return f"""#!/bin/sh
[ "$1" = pre ] || exit 0
held=0
for fd in /proc/[0-9]*/fd/*; do
    [ "$(readlink "$fd" 2>/dev/null)" = "{node}" ] && held=$((held + 1))
done
{report or f'echo "held=$held" >> {seen}'}
"""

"""Real Jupyter kernels for the tests, started by a real jupyter_client manager (jupyter_manager.py)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

SYSTEM_PYTHON = "/usr/bin/python3"
MANAGER = str(Path(__file__).parent / "jupyter_manager.py")


def ipykernel_missing() -> str | None:
    """Why no real kernel can be started here, or None."""
    try:
        probe = subprocess.run([SYSTEM_PYTHON, "-c", "import ipykernel, jupyter_client"],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{SYSTEM_PYTHON} cannot run: {exc}"
    if probe.returncode != 0:
        return (f"{SYSTEM_PYTHON} lacks ipykernel or jupyter_client "
                f"(python3-ipykernel, python3-jupyter-client)")
    return None


class Kernel:
    """One kernel and its manager; ``close`` ends both (the manager ends its own kernel)."""

    def __init__(self, tmp_path: Path, name: str = "kernel-test.json",
                 argv: list[str] | None = None) -> None:
        """``argv``: the kernel's command line, as a kernel spec gives it (its
        ``{connection_file}`` filled in by the manager); ipykernel_launcher's when None."""
        # An IPython folder of its own: kernels sharing ~/.ipython wait on each other's lock of
        # history.sqlite at exit (sqlite's 5 s), and a test writes nothing outside its folder.
        env = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1",
                   IPYTHONDIR=str(tmp_path / f"ipython-{Path(name).stem}"))
        spec: list[str] = []
        if argv is not None:  # a kernel spec of its own, found on JUPYTER_PATH
            folder = tmp_path / "jupyter" / "kernels" / "own"
            folder.mkdir(parents=True)
            (folder / "kernel.json").write_text(json.dumps(
                {"argv": argv, "display_name": "own", "language": "python"}))
            env["JUPYTER_PATH"] = str(tmp_path / "jupyter")
            spec = ["own"]
        self.log = open(tmp_path / "kernel.log", "w")  # noqa: SIM115 - the manager's stderr
        self.manager = subprocess.Popen(
            [SYSTEM_PYTHON, "-Xfrozen_modules=off", MANAGER, str(tmp_path / name), *spec],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            start_new_session=True, env=env)
        self.exit_status: int | None = None
        ready = self.event("ready", 60)
        self.pid: int = ready["ready"]
        self.connection_file: str = ready["connection_file"]
        # The pidfd names this kernel and no other, even once its pid is reused.
        self.pidfd = os.pidfd_open(self.pid)

    def event(self, name: str, timeout: float) -> dict[str, Any]:
        """The manager's next event named ``name`` (others are kept), or AssertionError."""
        assert self.manager.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.manager.stdout], [], [], max(left, 0))
            assert ready, f"no {name!r} from the kernel manager within {timeout} s"
            line = self.manager.stdout.readline()
            assert line, f"the kernel manager ended before {name!r}: see {self.log.name}"
            event: dict[str, Any] = json.loads(line)
            if "exited" in event:
                self.exit_status = event["exited"]
            if name in event:
                return event

    def command(self, line: str, timeout: float = 60) -> None:
        assert self.manager.stdin is not None
        self.manager.stdin.write(line + "\n")
        self.manager.stdin.flush()
        self.event("done", timeout)

    def alive(self) -> bool:
        return not select.select([self.pidfd], [], [], 0)[0]

    def wait_exit(self, timeout: float) -> int | None:
        """The kernel's exit status once it ended within ``timeout`` seconds; None if it still runs."""
        if not select.select([self.pidfd], [], [], timeout)[0]:
            return None
        if self.exit_status is None:
            self.event("exited", 10)
        return self.exit_status

    def close(self) -> None:
        if self.manager.stdin is not None:
            with contextlib.suppress(OSError):
                self.manager.stdin.close()
        try:
            self.manager.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.manager.pid, signal.SIGKILL)
            self.manager.wait()
        if self.alive():
            # The manager could not end it: this kernel is the test's own.
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        os.close(self.pidfd)
        if self.manager.stdout is not None:
            self.manager.stdout.close()
        self.log.close()

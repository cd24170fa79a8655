"""Real AI jobs for the tests: torchrun and Open MPI from Debian's packages, started and always ended.

The jobs run under /usr/bin/python3, where Debian installs python3-torch and
python3-mpi4py (tools/test installs them); a test skips with the reason
when they are missing. Each job writes what it went through into its own
``out`` folder (helpers/torch_job.py, helpers/mpi_job.py): the signals each
of its processes received, its checkpoints, its readiness.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from helpers.wait import wait_for

HERE = Path(__file__).parent
SYSTEM_PYTHON = "/usr/bin/python3"


def need(module: str) -> None:
    """Skip unless the system Python has ``module`` (Debian's package of it)."""
    probe = subprocess.run([SYSTEM_PYTHON, "-c", f"import {module}"], capture_output=True,
                           check=False) if os.path.exists(SYSTEM_PYTHON) else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} cannot import {module} (Debian's package; tools/test "
                    "installs it as root)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Job:
    """One framework job in a session of its own, killed whole when the test ends."""

    def __init__(self, argv: list[str], out: Path, ranks: int) -> None:
        self.out = out
        self.ranks = ranks
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "launcher.log", "w")  # noqa: SIM115 - closed in end()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(out), "OMP_NUM_THREADS": "1",
               "OMPI_MCA_btl": "self,vader", "OMPI_MCA_plm": "isolated"}
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env, cwd=out)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 90.0) -> list[int]:
        """The ranks' pids, once every rank said it is in its loop."""
        files = [self.out / f"ready-{r}" for r in range(self.ranks)]

        def ready() -> list[int] | bool:
            if all(f.exists() and f.read_text().strip() for f in files):
                return [int(f.read_text().split()[0]) for f in files]
            return self.proc.poll() is not None  # ended: no use waiting on

        ranks = wait_for(ready, timeout, interval=0.1)
        if isinstance(ranks, list):
            return ranks
        raise AssertionError(f"the job did not start: {(self.out / 'launcher.log').read_text()}")

    def signals(self) -> list[str]:
        with contextlib.suppress(FileNotFoundError):
            return (self.out / "signals.log").read_text().splitlines()
        return []

    def end(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def torchrun(node: str, out: Path, *, save_s: float = 3.0, workers: int = 2,
             max_restarts: int = 0, python_options: tuple[str, ...] = (),
             shell: bool = False) -> Job:
    """``python_options``: the interpreter's own, before ``-m torch.distributed.run``.
    ``shell``: each rank is a shell (``--no_python``) that runs the training script."""
    need("torch")
    script = [str(HERE / "torch_job.py")]
    if shell:  # a shell that waits for python, as a wrapper script with more to do does
        script = ["--no_python", "/bin/bash", "-c",
                  f'{SYSTEM_PYTHON} {script[0]} "$@"; exit $?', "rank"]
    # Debian's torch 1.13 on Python 3.11 needs --redirects/--tee: its
    # Std.from_str("0") returns None under 3.11's enum (the package's bug).
    argv = [SYSTEM_PYTHON, *python_options, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
            "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), "--max_restarts", str(max_restarts),
            "--monitor_interval", "0.1",
            *script, "--node", node, "--out", str(out),
            "--save-s", str(save_s), "--workers", str(workers)]
    return Job(argv, out, 2)


def mpirun(node: str, out: Path, *, save_s: float = 3.0, holding: bool = False,
           fail_rank: int = -1) -> Job:
    """``holding``: mpirun holds the node itself, as after a job script's ``exec 3<NODE``;
    ``fail_rank``: that rank leaves at once on SIGINT, with an error (helpers/mpi_job.py)."""
    need("mpi4py")
    exe = shutil.which("mpirun", path="/usr/bin:/bin")
    if exe is None:
        pytest.skip("no mpirun (Debian's openmpi-bin; tools/test installs it as root)")
    argv = [exe, "--allow-run-as-root", "--oversubscribe", "-np", "2", SYSTEM_PYTHON,
            str(HERE / "mpi_job.py"), "--node", node, "--out", str(out), "--save-s", str(save_s),
            "--fail-rank", str(fail_rank)]
    if holding:
        argv = ["sh", "-c", 'exec 3<"$0"; exec "$@"', node, *argv]
    return Job(argv, out, 2)


def state(pid: int) -> str:
    """The process's state letter (R, S, T, Z...), "" once it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    return data[data.rfind(b")") + 2:].split()[0].decode()


def wait_gone(pid: int, timeout: float) -> bool:
    return wait_for(lambda: state(pid) in ("", "Z"), timeout)

"""A real torchrun job (Debian's python3-torch, gloo on the CPU) drained as its framework expects.

Two ranks hold the node, each with two forked DataLoader workers that
inherit it; rank 0 checkpoints on SIGINT (helpers/torch_job.py). The guard
signals torchrun's elastic agent alone, which forwards SIGINT once to each
rank; the workers leave with their ranks. The job's own record says what it
got: one SIGINT per rank, none per worker, and a complete checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.frameworks import HERE, SYSTEM_PYTHON, Job, free_port, need, torchrun, wait_gone
from helpers.runners import cli


def checkpoint_step(out: Path) -> int:
    """The step rank 0's complete checkpoint holds (torch.load in the job's own Python)."""
    got = subprocess.run([SYSTEM_PYTHON, "-c", "import sys, torch; "
                          "print(torch.load(sys.argv[1])['step'])", str(out / "ckpt.pt")],
                         capture_output=True, text=True, check=True)
    return int(got.stdout)


def holders_by_pid(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {h["pid"]: h for h in report["holders"]}


def drained_once(job: Job, job_config: Path, ranks: list[int]) -> dict[str, Any]:
    """``drain --yes``: allowed, one SIGINT for each rank, the checkpoint whole, the agent
    gone; the report."""
    code, out, err = cli("--config", str(job_config), "drain", "--yes", "--json")
    report: dict[str, Any] = json.loads(out)
    signals = job.signals()
    assert code == 0 and report["verdict"] == "allow", (report, err, signals)
    got = [line.split()[1:] for line in signals if line.startswith("sigint")]
    assert sorted(int(pid) for pid, _role in got) == sorted(ranks), signals
    assert (job.out / "ckpt.pt").exists() and not (job.out / "ckpt.tmp").exists(), signals
    assert wait_gone(job.pid, 10)
    return report


@pytest.mark.parametrize("python_options", [(), ("-W", "ignore")], ids=["plain", "warnings"])
def test_check_names_the_launcher_and_the_workers(tmp_path: Path, node: str, job_config: Path,
                                                   jobs: list[Job],
                                                   python_options: tuple[str, ...]) -> None:
    job = torchrun(node, tmp_path / "job", python_options=python_options)
    jobs.append(job)
    ranks = job.wait_ready()
    _code, out, _err = cli("--config", str(job_config), "check", "--json")
    report = json.loads(out)
    assert report["verdict"] == "allow", report
    by_pid = holders_by_pid(report)
    workers = [int(p) for r in range(2) for p in (job.out / f"pids-{r}").read_text().split()]
    assert set(ranks) | set(workers) <= set(by_pid)
    for rank in ranks:
        assert f"torchrun (pid {job.pid})" in by_pid[rank]["outcome"]["why"]
    for worker in workers:
        assert "leaves with its parent" in by_pid[worker]["outcome"]["why"]
        # A DataLoader worker's SIGSEGV, SIGBUS and SIGFPE handlers only report: no note.
        assert not any("catches fatal signals" in n for n in by_pid[worker]["notes"]), \
            by_pid[worker]["notes"]
    assert job.signals() == []  # check sends nothing, ever


def test_drain_saves_the_checkpoint_with_one_sigint_per_rank(
        tmp_path: Path, node: str, job_config: Path, jobs: list[Job]) -> None:
    job = torchrun(node, tmp_path / "job", save_s=3.0)
    jobs.append(job)
    ranks = job.wait_ready()
    workers = [int(p) for r in range(2) for p in (job.out / f"pids-{r}").read_text().split()]
    code, out, err = cli("--config", str(job_config), "drain", "--yes", "--json")
    report = json.loads(out)
    assert report["verdict"] == "allow", (report, err)
    assert code == 0
    signals = job.signals()
    got = [line.split()[1:] for line in signals if line.startswith("sigint")]
    # One SIGINT per rank, forwarded by the agent; none for the workers.
    assert sorted(int(pid) for pid, _role in got) == sorted(ranks), signals
    assert all(role == "rank" for _pid, role in got), signals
    assert (job.out / "ckpt.pt").exists() and not (job.out / "ckpt.tmp").exists(), signals
    assert checkpoint_step(job.out) > 0
    by_pid = holders_by_pid(report)
    for pid in ranks + workers:
        assert by_pid[pid]["outcome"]["kind"] == "exited", by_pid[pid]
    # The agent got the one signal and left once its ranks had.
    assert wait_gone(job.pid, 10)
    assert "Received 2 death signal" in (job.out / "launcher.log").read_text()


def test_max_restarts_starts_no_rank_during_the_sleep(tmp_path: Path, node: str,
                                                     job_config: Path, jobs: list[Job]) -> None:
    job = torchrun(node, tmp_path / "job", save_s=1.0, max_restarts=3)
    jobs.append(job)
    job.wait_ready()
    _code, out, err = cli("--config", str(job_config), "drain", "--yes", "--json")
    report = json.loads(out)
    assert report["verdict"] == "allow", (report, err)
    assert not any(h.get("tag") == "respawned" for h in report["holders"])
    assert wait_gone(job.pid, 10)
    time.sleep(1.0)  # as long as the sleep that follows would last, in this test
    restarts = [f.read_text().split()[1] for f in job.out.glob("ready-*")]
    assert restarts == ["0", "0"], restarts  # every rank that ever ran is of the first start
    assert (job.out / "ckpt.pt").exists()


def test_a_rank_run_by_a_shell_gets_one_sigint(tmp_path: Path, node: str, job_config: Path,
                                               jobs: list[Job]) -> None:
    """``torchrun --no_python`` runs each rank's shell, and the shell runs the python that
    holds the node. The agent forwards SIGINT to its shells alone, which wait for python:
    the python ranks get their one SIGINT from the guard, the agent its own."""
    job = torchrun(node, tmp_path / "job", save_s=1.0, shell=True)
    jobs.append(job)
    ranks = job.wait_ready()
    _code, out, _err = cli("--config", str(job_config), "check", "--json")
    by_pid = holders_by_pid(json.loads(out))
    for rank in ranks:
        assert f"torchrun (pid {job.pid}) gets its own" in by_pid[rank]["outcome"]["why"], \
            by_pid[rank]
        assert any("out of reach of the signal" in n and "end the script with exec" in n
                   for n in by_pid[rank]["notes"]), by_pid[rank]
    drained_once(job, job_config, ranks)


def test_torch_distributed_launch_of_torch_1_13_is_the_agent_and_forwards(
        tmp_path: Path, node: str, job_config: Path, jobs: list[Job]) -> None:
    """``python -m torch.distributed.launch`` runs torchrun's agent in Debian's torch 1.13:
    its ranks' environment names the elastic run (TORCHELASTIC_RUN_ID), so the agent gets
    the one SIGINT and forwards it, as torchrun does; it is not held."""
    need("torch")
    out = tmp_path / "job"
    job = Job([SYSTEM_PYTHON, "-m", "torch.distributed.launch", "--use_env", "--redirects", "1",
               "--tee", "1", "--nnodes", "1", "--nproc_per_node", "2", "--master_addr",
               "127.0.0.1", "--master_port", str(free_port()), "--monitor_interval", "0.1",
               str(HERE / "torch_job.py"), "--node", node, "--out", str(out), "--save-s", "1",
               "--workers", "1"], out, 2)
    jobs.append(job)
    ranks = job.wait_ready()
    _code, said, _err = cli("--config", str(job_config), "check", "--json")
    by_pid = holders_by_pid(json.loads(said))
    for rank in ranks:
        assert f"from torchrun (pid {job.pid})" in by_pid[rank]["outcome"]["why"], by_pid[rank]
    drained_once(job, job_config, ranks)
    assert "Received 2 death signal" in (out / "launcher.log").read_text()


def test_a_save_longer_than_the_wait_gets_no_second_sigint_from_the_next_attempt(
        tmp_path: Path, node: str, job_config: Path, jobs: list[Job]) -> None:
    """The first attempt vetoes while rank 0 saves on; the next one, asked at once, neither
    forwards through the agent again nor signals the rank: the save completes."""
    job_config.write_text(job_config.read_text().replace("timeout_s = 25", "timeout_s = 2"))
    job = torchrun(node, tmp_path / "job", save_s=6.0)
    jobs.append(job)
    ranks = job.wait_ready()
    reports = []
    for _attempt in range(2):
        code, out, err = cli("--config", str(job_config), "drain", "--yes", "--json")
        reports.append(json.loads(out))
        assert code == 1 and reports[-1]["verdict"] == "veto", (reports[-1], err)
        if len(reports) == 1:  # check says so between the two, of the rank alone
            _code, out, _err = cli("--config", str(job_config), "check", "--json")
            notes = {pid: " ".join(h["notes"]) for pid, h in holders_by_pid(json.loads(out)).items()}
            assert "sent SIGINT already" in notes[ranks[0]], notes
            assert not [pid for pid, n in notes.items() if "already" in n and pid not in ranks]
    first, second = reports
    by_pid = {r["pid"]: r["text"] for r in second["reason_details"]}
    assert f"attempt {first['attempt_id']} sent it SIGINT, and none is sent again" in \
        by_pid[ranks[0]], by_pid
    workers = [int(p) for p in (job.out / "pids-0").read_text().split()]
    for worker in set(workers) & set(by_pid):  # never signalled, by either attempt
        assert "leaves with its parent, never signalled" in by_pid[worker], by_pid[worker]
    assert wait_gone(job.pid, 40)
    got = [line.split()[1:] for line in job.signals() if line.startswith("sigint")]
    assert sorted(int(pid) for pid, _role in got) == sorted(ranks), job.signals()
    assert (job.out / "ckpt.pt").exists() and not (job.out / "ckpt.tmp").exists()
    assert checkpoint_step(job.out) > 0

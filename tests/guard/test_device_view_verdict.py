"""What the device's readings before and after the drain decide, through the real pipeline.

The real nvidia-smi backend reads the fake nvidia-smi (tests/helpers/nvidia.py); the
holders are real processes. A family with a device no backend reads is a certain veto
before anyone is signalled, a busy device beside it or not; a process a reading lists is
judged by when the sample that first listed it was taken; a backend the reading before the
drain left only a sliver of its time is asked after the drain, not taken at its timeout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES, FIXTURES
from helpers.holders import Holders
from helpers.nvidia import IDLE_GPUS, TOOL, FakeNvidiaSmi, busy_gpus
from helpers.runners import cli, guard

from suspendguard.config import IdleConfig
from suspendguard.guard.inventory import FAMILY_NODES
from suspendguard.idle.base import IdleReport
from suspendguard.idle.npusmi import NpuSmiBackend
from suspendguard.idle.nvidiasmi import NvidiaSmiBackend
from suspendguard.idle.sampler import check_idle
from suspendguard.system.deadline import Deadline

NO_FIGURE = "[N/A]"


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvidiaSmi:
    return FakeNvidiaSmi(tmp_path, monkeypatch)


def two_gpus(first: str, second: str) -> list[str]:
    """gpu 0 and gpu 1 (another uuid), their GPU utilization ``first`` and ``second``."""
    header, gpu0 = busy_gpus(util=first, memory=first)
    gpu1 = IDLE_GPUS[1].split(", ")
    gpu1[0], gpu1[1], gpu1[3], gpu1[4] = "1", gpu1[1][:-2] + "ff", second, second
    return [header, gpu0, ", ".join(gpu1)]


class GpuCheck:
    """An idle check through the real nvidia-smi backend, for a host of ``gpus`` GPUs; counts
    its calls and, before each, runs ``before(n)`` (n: how many came before)."""

    def __init__(self, gpus: int = 1, before: Callable[[int], None] = lambda n: None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.gpus, self.before, self.sleep = gpus, before, sleep
        self.calls = 0

    def __call__(self, config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        self.before(self.calls)
        self.calls += 1
        cfg = replace(config, nvidia_smi=str(TOOL), backends=("nvidia-smi",), interval_ms=10,
                      settle_s=min(config.settle_s, 0.3))
        return check_idle(cfg, ["nvidia"] * self.gpus, deadline, backends=[NvidiaSmiBackend(cfg)],
                          sleep=self.sleep)


# -- a family no backend can answer for: a certain veto before the drain, a busy device or not

UNREAD = "gpu 1 (nvidia-smi): no utilization reading"
UNLISTED = "nvidia-smi reports 1 of the 2 devices found"


@pytest.mark.parametrize(("gpus", "words"), [
    (two_gpus("97 %", NO_FIGURE), UNREAD),  # gpu 0 busy, gpu 1 gives no figure
    (two_gpus("0 %", NO_FIGURE), UNREAD),   # gpu 0 idle, gpu 1 gives no figure
    (busy_gpus("97 %"), UNLISTED),          # gpu 0 busy; the host's second GPU is not listed
], ids=["busy-and-no-figure", "idle-and-no-figure", "busy-and-unlisted"])
def test_a_device_no_backend_reads_vetoes_before_anyone_is_signalled(
        make_config: Any, node: str, holders: Holders, smi: FakeNvidiaSmi,
        gpus: list[str], words: str) -> None:
    job, pid = holders.start(node)
    smi.show(gpus, [pid])
    check = GpuCheck(gpus=2)
    report = guard(make_config(), idle_check=check)
    assert report.verdict.kind == "veto", report.verdict.texts
    [reason] = report.verdict.reasons  # one veto for the family, no second text for it
    assert reason.code == "device-unknown" and reason.device == "nvidia", reason
    assert reason.text.startswith("nvidia: no idle backend could answer ("), reason.text
    assert words in reason.text, reason.text
    [hr] = report.holders
    assert hr.outcome.kind == "not-signalled" and "veto anyway" in hr.outcome.why
    assert holders.signals() == [] and job.poll() is None
    assert check.calls == 1  # no drain, so no reading after it


@pytest.fixture
def gpu_conf(tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config for the CLI: the test node found as an NVIDIA GPU (guard/inventory.py), read by
    the real nvidia-smi backend on the fake nvidia-smi."""
    monkeypatch.setitem(FAMILY_NODES, "nvidia", {"compute": (node,)})
    path = tmp_path / "config.toml"
    path.write_text(
        '[devices]\nfamilies = ["nvidia"]\nnodes = []\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        f'[idle]\nbackends = ["nvidia-smi"]\nnvidia_smi = "{TOOL}"\n'
        'samples = 1\nsettle_s = 0.3\ninterval_ms = 10\n'
        '[drain]\ntimeout_s = 5\n')
    return path


def test_check_predicts_the_veto_of_a_busy_gpu_beside_one_no_backend_reads(
        gpu_conf: Path, node: str, holders: Holders, smi: FakeNvidiaSmi) -> None:
    """The dry run's busy GPU is expected before the drain; the GPU beside it that gives no
    figure is not, and no drain changes it: check predicts the veto, not allow."""
    job, pid = holders.start(node)
    smi.show(two_gpus("97 %", NO_FIGURE), [pid])
    code, out, err = cli("--config", str(gpu_conf), "check", "--json")
    data = json.loads(out)
    assert (code, data["verdict"]) == (1, "veto"), (out, err)
    [why] = data["reasons"]
    assert why.startswith("nvidia: no idle backend could answer (gpu 1 (nvidia-smi): "), why
    assert holders.signals() == [] and job.poll() is None


# -- a process is judged by the sample that first listed it

def test_a_job_that_opens_the_device_between_two_samples_after_the_drain_appeared(
        make_config: Any, holders: Holders, tmp_path: Path, smi: FakeNvidiaSmi) -> None:
    """The reading after the drain lists a process the scan missed, which is drained; the
    reading after that drain lists a host job only from its second sample on, the job having
    started after the first: it appeared after the drain, visible here, not hidden."""
    held = tmp_path / "not-a-node"
    held.write_bytes(b"")
    _missed, missed = holders.start(str(held))  # holds nothing the scan knows
    late: list[int] = []

    def before(n: int) -> None:
        smi.show(IDLE_GPUS, [missed] if n == 0 else [])

    def sleep(seconds: float) -> None:
        if check.calls == 2 and not late:  # between the first two samples of that reading
            time.sleep(0.1)  # some clock ticks after the first sample began
            late.append(holders.start(str(held))[1])
            smi.show(IDLE_GPUS, late)
        time.sleep(seconds)

    check = GpuCheck(before=before, sleep=sleep)
    report = guard(make_config(idle={"samples": 2}), idle_check=check)
    assert check.calls == 2 and late, check.calls
    assert report.verdict.kind == "veto", report.verdict.texts
    [reason] = report.verdict.reasons
    assert reason.code == "appeared", reason
    assert f"reports pid {late[0]} " in reason.text and "appeared after the drain" in reason.text
    assert holders.signals() == [f"{missed} SIGINT"]  # the job that appeared is not signalled
    [hr] = [h for h in report.holders if h.decision.holder.pid == late[0]]
    assert hr.outcome.kind == "not-signalled"


# -- a backend the reading before the drain left a sliver of its time is asked after it

SLIVER = {"command_timeout_s": 3.0, "samples": 1, "settle_s": 0.3, "interval_ms": 10}


def slow_npu_smi_then_nvidia_smi(tmp_path: Path, smi: FakeNvidiaSmi, monkeypatch: pytest.MonkeyPatch,
                                 answers_after: bool) -> tuple[Any, list[IdleReport]]:
    """An idle check that asks npu-smi first, which takes 2 s of the first reading's 3, then
    nvidia-smi, which hangs there; after the drain npu-smi answers at once, and nvidia-smi
    too where ``answers_after``. Its reports, in order, with it."""
    slow = tmp_path / "slow-npu-smi"
    slow.write_text(f'#!/bin/sh\nsleep "$SLOW_S"\nexec {FAKES / "idle" / "npu-smi"} "$@"\n')
    slow.chmod(0o755)
    monkeypatch.setenv("SLOW_S", "2.0")
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(FIXTURES / "npu-smi" / "310-atlas300i-idle.txt"))
    smi.mode("hang")
    seen: list[IdleReport] = []

    def check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> IdleReport:
        if seen:
            monkeypatch.setenv("SLOW_S", "0")
            if answers_after:
                smi.mode("")
        cfg = replace(config, npu_smi=str(slow), nvidia_smi=str(TOOL))
        seen.append(check_idle(cfg, ["ascend", "nvidia"], deadline,
                               backends=[NpuSmiBackend(cfg), NvidiaSmiBackend(cfg)]))
        return seen[-1]

    return check, seen


def test_a_backend_left_a_sliver_of_the_first_reading_is_asked_after_the_drain(
        make_config: Any, node: str, holders: Holders, tmp_path: Path, smi: FakeNvidiaSmi,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """npu-smi, asked first, answers slowly, within its time; nvidia-smi gets what is left of
    the reading's command_timeout_s, too little, and is killed: it has not said it cannot
    answer. The job is drained, and both answer idle after the drain."""
    check, seen = slow_npu_smi_then_nvidia_smi(tmp_path, smi, monkeypatch, answers_after=True)
    job, pid = holders.start(node)
    report = guard(make_config(idle=SLIVER), idle_check=check)
    first = seen[0]
    assert first.unasked == ("nvidia-smi",), (first.unasked, first.warnings, first.veto_reasons)
    [cut] = [b.reason for b in first.backends if b.name == "nvidia-smi"]
    assert "the backends asked before it took the rest" in cut, cut
    assert report.verdict.kind == "allow", report.verdict.texts
    assert job.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]
    assert len(seen) == 2 and seen[1].state == "idle"


def test_a_dry_run_predicts_the_veto_of_a_backend_that_answers_neither_time(
        make_config: Any, node: str, holders: Holders, tmp_path: Path, smi: FakeNvidiaSmi,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, but nvidia-smi hangs after the drain too, with all its time: a dry run's
    second reading says the family unknown, which no drain changes (not "expected")."""
    check, seen = slow_npu_smi_then_nvidia_smi(tmp_path, smi, monkeypatch, answers_after=False)
    job, _pid = holders.start(node)
    report = guard(make_config(idle=SLIVER), dry_run=True, idle_check=check)
    assert seen[0].unasked == ("nvidia-smi",) and len(seen) == 2
    assert report.verdict.kind == "veto", (report.verdict.texts, report.verdict.warnings)
    [reason] = report.verdict.reasons
    assert reason.code == "device-unknown" and reason.device == "nvidia", reason
    assert "no answer within the timeout" in reason.text, reason.text
    assert holders.signals() == [] and job.poll() is None

"""``restore`` after resume on a fake GPU: held while unhealthy, in status, Prometheus, the journal."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MODPROBE, Gpu
from helpers import FIXTURES
from helpers.holders import Holders
from helpers.journal import entries, standing_in, unfilled
from helpers.records import ended, finding
from helpers.runners import cli

from suspendguard.commands.restore import HELD_MESSAGE_ID
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store.history import History


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket standing where journald's is."""
    with standing_in(tmp_path, monkeypatch) as sock:
        yield sock


@pytest.fixture
def gpu_conf(tmp_path: Path, node: str, gpu: Gpu, monkeypatch: pytest.MonkeyPatch) -> Path:
    # CUDA alone answers: no NVML (whatever another test left imported), no nvidia-smi
    monkeypatch.setitem(sys.modules, "pynvml", None)
    path = tmp_path / "config.toml"
    path.write_text(
        f'[devices]\nfamilies = ["nvidia"]\nnodes = ["{node}"]\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        '[idle]\nbackends = []\n'
        f'nvidia_smi = "{tmp_path / "no-nvidia-smi"}"\n'
        f'[resume]\ncuda_library = "{gpu.lib}"\nmodprobe = "{MODPROBE}"\n')
    return path


def stopped_job(state: Path) -> int:
    """A resumed attempt that stopped one service; its id."""
    now = time.time()
    with History.open(str(state)) as h:
        attempt = h.begin("suspend", "unit", False, "digest", now - 5)
        h.finish(ended(attempt, "allow", finished=now - 4, stops=[Stop(
            Owner("systemd-service", "train.service"), 0, now - 4.5)]))
    return attempt


def ascend_conf(tmp_path: Path, npu: Any) -> Path:
    """A config on the fake npu-smi and pyACL, with [resume] repair = false."""
    conf = tmp_path / "config.toml"
    conf.write_text(
        f'[devices]\nfamilies = ["ascend"]\n[state]\ndir = "{tmp_path / "state"}"\n'
        f'[idle]\nbackends = []\nnpu_smi = "{npu.tool}"\nascend_env = "{npu.env}"\n'
        '[resume]\nrepair = false\n')
    return conf


def history(state: Path) -> Any:
    with History.open(str(state), readonly=True) as h:
        return h.attempts(1)[0], h.last_health()


def test_held_while_unhealthy_then_restored_once_healthy(
        gpu_conf: Path, gpu: Gpu, no_bus: str, journal: socket.socket,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "broken")  # still 999 after the reload
    state = gpu_conf.parent / "state"
    stopped_job(state)
    code, out, _ = cli("--config", str(gpu_conf), "restore")
    reason = "device nvidia unhealthy: CUDA init error 999 (CUDA_ERROR_UNKNOWN) after reload"
    assert code == 1
    assert out == f"1 jobs held after resume: {reason}\n"
    attempt, health = history(state)
    assert [(s.result, s.why) for s in attempt.stops] == [("held", reason)]
    notes = [(e.phase, e.note) for e in attempt.events]
    assert [p for p, _ in notes] == ["health", "repair", "repair", "health"]
    assert "reloaded nvidia_uvm" in notes[1][1]
    assert [(r.device, r.state) for r in health] == [("nvidia", "unhealthy")]
    sent = entries(journal)
    assert len(sent) == 1 and sent[0]["MESSAGE_ID"] == HELD_MESSAGE_ID
    assert sent[0]["SUSPENDGUARD_REASON_CODE"] == "unhealthy-after-resume"
    assert unfilled(HELD_MESSAGE_ID, sent[0]) == set()  # what journalctl -x fills in
    assert sent[0]["MESSAGE"] == f"1 jobs held after resume: {reason} (train.service)"

    code, out, _ = cli("--config", str(gpu_conf), "history", "--wide")
    assert code == 0 and f"1 jobs held after resume: {reason}" in out
    code, out, _ = cli("--config", str(gpu_conf), "status")
    assert out.splitlines()[0] == f"1 jobs held after resume: {reason}"
    assert "systemd-service:train.service" in out and f"held: {reason}" in out
    assert f"suspendguard --config {gpu_conf} restore --force" in out
    assert "  nvidia: unhealthy: CUDA init error 999" in out
    code, out, _ = cli("--config", str(gpu_conf), "status", "--prometheus")
    assert "suspendguard_jobs_held 1.0" in out.splitlines()
    assert ('suspendguard_device_health{device="nvidia",family="nvidia",state="unhealthy"} 1.0'
            in out.splitlines())
    code, out, _ = cli("--config", str(gpu_conf), "status", "--json")
    assert json.loads(out)["history"]["held"] == f"1 jobs held after resume: {reason}"

    # The device recovers (the reload works now): the next restore starts the job.
    monkeypatch.delenv("FAKE_CUDA_MODE")
    gpu.reloaded.unlink(missing_ok=True)
    code, out, _ = cli("--config", str(gpu_conf), "restore", "--json")
    doc = json.loads(out)
    assert doc["held"] == [] and doc["health"]["final"]["healthy"] is True
    # no systemd on this bus: the start is tried, and fails saying so
    assert [r["result"] for r in doc["restored"]] == ["failed"]
    assert code == 3
    attempt, health = history(state)
    assert attempt.stops[0].result == "failed"
    assert [(r.device, r.state) for r in health] == [("gpu 0", "healthy")]
    assert not entries(journal)
    code, out, _ = cli("--config", str(gpu_conf), "status", "--prometheus")
    assert "suspendguard_jobs_held 0.0" in out.splitlines()


def test_force_starts_them_anyway(gpu_conf: Path, gpu: Gpu, no_bus: str,
                                  journal: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "broken")
    stopped_job(gpu_conf.parent / "state")
    code, out, err = cli("--config", str(gpu_conf), "restore", "--force", "--json")
    doc = json.loads(out)
    assert code == 3  # tried: no systemd on this bus to start it
    assert doc["held"] == [] and [r["name"] for r in doc["restored"]] == ["train.service"]
    assert "restoring onto an unhealthy device (--force)" in err
    assert not entries(journal)


def test_restore_on_unhealthy_restore(gpu_conf: Path, gpu: Gpu, no_bus: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_MODE", "broken")
    gpu_conf.write_text(gpu_conf.read_text() + 'restore_on_unhealthy = "restore"\n')
    stopped_job(gpu_conf.parent / "state")
    code, out, err = cli("--config", str(gpu_conf), "restore", "--json")
    assert code == 3 and json.loads(out)["held"] == []
    assert 'restore_on_unhealthy = "restore"' in err


# [policy] ignore keeps the drain's signal from a job; it does not make a reload of nvidia_uvm
# under that job safe. Only the driver's own daemons are not holders here.
@pytest.mark.parametrize("rule", ["", "[[policy.ignore]]\ncmdline = 'holder\\.py'\n"],
                         ids=["plain", "policy-ignore"])
def test_a_holder_the_guard_did_not_stop_blocks_the_repair(
        gpu_conf: Path, gpu: Gpu, node: str, holders: Holders, no_bus: str,
        journal: socket.socket, rule: str) -> None:
    gpu_conf.write_text(gpu_conf.read_text() + rule)
    _, pid = holders.start(node)
    stopped_job(gpu_conf.parent / "state")
    code, out, _ = cli("--config", str(gpu_conf), "restore")
    assert code == 1 and out.startswith("1 jobs held after resume: device nvidia unhealthy")
    assert not any(c.startswith("modprobe") for c in gpu.calls())
    attempt, _ = history(gpu_conf.parent / "state")
    notes = [e.note for e in attempt.events]
    assert any(f"not repaired: the device is held by pid {pid} python" in n for n in notes), notes
    assert attempt.stops[0].result == "held"


def test_health_check_off_restores_without_asking(gpu_conf: Path, gpu: Gpu,
                                                   no_bus: str) -> None:
    gpu_conf.write_text(gpu_conf.read_text() + "health_check = false\n")
    stopped_job(gpu_conf.parent / "state")
    code, out, _ = cli("--config", str(gpu_conf), "restore", "--json")
    assert code == 3 and json.loads(out)["health"] is None and not gpu.calls()


def test_idle_host_is_checked_and_repaired_too(gpu_conf: Path, gpu: Gpu, no_bus: str) -> None:
    """Nothing was stopped: the device is still repaired for the next job, and nothing is held."""
    code, out, _ = cli("--config", str(gpu_conf), "restore")
    assert (code, out) == (0, "nothing to restore\n")
    assert "modprobe nvidia_uvm" in gpu.calls()
    with History.open(str(gpu_conf.parent / "state"), readonly=True) as h:
        assert [(r.device, r.state) for r in h.last_health()] == [("gpu 0", "healthy")]


def test_a_log_finding_holds_once_and_the_next_restore_asks_the_devices(
        npu: Any, tmp_path: Path, no_bus: str) -> None:
    # [resume] repair = false: nothing checks again within the restore. The
    # finding the resume left counts at its first check; the restore after the
    # hold asks the devices alone, and npu-smi and pyACL answer healthy.
    conf = ascend_conf(tmp_path, npu)
    attempt = stopped_job(tmp_path / "state")
    with History.open(str(tmp_path / "state")) as h:
        h.record_findings(attempt, [finding("device-busy")])
    code, out, _ = cli("--config", str(conf), "restore")
    assert code == 1 and out.startswith("1 jobs held after resume: device ")
    code, out, _ = cli("--config", str(conf), "restore", "--json")
    doc = json.loads(out)
    assert doc["held"] == [] and doc["health"]["final"]["healthy"] is True
    assert code == 3  # the start is tried: no systemd on this bus


@pytest.mark.parametrize(("kept", "held", "reason"), [
    ("Alarm", False, "npu-smi health Alarm, as before the suspend"),
    ("OK", True, "npu-smi health Alarm (before the suspend: OK)"),
    (None, True, "npu-smi health Alarm"),  # no word kept (an older history): as before
])
def test_restore_judges_npu_smi_health_against_the_word_kept_before_the_suspend(
        npu: Any, tmp_path: Path, no_bus: str, monkeypatch: pytest.MonkeyPatch,
        kept: str | None, held: bool, reason: str) -> None:
    # The recorded 310B4 edge board reads Alarm in plain use.
    monkeypatch.setenv("FAKE_NPU_SMI_INFO",
                       str(FIXTURES / "npu-smi" / "310b4-edge-no-process-table.txt"))
    npu.acl(count=1, open=[0])
    conf = ascend_conf(tmp_path, npu)
    attempt = stopped_job(tmp_path / "state")
    if kept is not None:
        with History.open(str(tmp_path / "state")) as h:
            h.record_health_before(attempt, [("npu 0", "ascend", kept)])
    code, out, _ = cli("--config", str(conf), "restore", "--json")
    doc = json.loads(out)
    assert (code, bool(doc["held"])) == ((1, True) if held else (3, False)), doc
    assert [(d["device"], d["reason"]) for d in doc["health"]["final"]["devices"]
            if d["device"] == "npu 0"] == [("npu 0", reason)], doc


def test_restore_holds_jobs_when_a_device_read_before_the_suspend_did_not_come_back(
        npu: Any, tmp_path: Path, no_bus: str) -> None:
    npu.acl(count=1, open=[0])  # pyACL counts one device; the guard read two before
    conf = ascend_conf(tmp_path, npu)
    attempt = stopped_job(tmp_path / "state")
    with History.open(str(tmp_path / "state")) as h:
        h.record_health_before(attempt, [("device 0", "ascend", ""), ("device 1", "ascend", "")])
    code, out, _ = cli("--config", str(conf), "restore", "--json")
    doc = json.loads(out)
    assert code == 1 and [s["name"] for s in doc["held"]] == ["train.service"], doc
    assert [(d["device"], d["state"], d["reason"]) for d in doc["health"]["final"]["devices"]
            if d["device"].startswith("device ")] == [
        ("device 0", "healthy", ""),
        ("device 1", "unhealthy", "not listed by pyACL after resume (before the suspend: listed)")]


def test_after_a_sleep_in_observe_mode_restore_checks_against_its_look_not_an_older_attempt(
        npu: Any, tmp_path: Path, no_bus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # An older real attempt read OK; the observe mode's look at this sleep read Alarm (the
    # recorded 310B4 edge board in plain use) and the sleep went ahead: Alarm now is as before.
    monkeypatch.setenv("FAKE_NPU_SMI_INFO",
                       str(FIXTURES / "npu-smi" / "310b4-edge-no-process-table.txt"))
    npu.acl(count=1, open=[0])
    conf = ascend_conf(tmp_path, npu)
    older = stopped_job(tmp_path / "state")
    now = time.time()
    with History.open(str(tmp_path / "state")) as h:
        h.record_health_before(older, [("npu 0", "ascend", "OK")])
        h.record_event("health", "suspend", "the older sleep's check", older)
        look = h.begin("suspend", "unit", True, "digest", now - 2)
        h.finish(ended(look, "veto", finished=now - 1))
        h.record_health_before(look, [("npu 0", "ascend", "Alarm")])
        h.begin("suspend", "cli", True, "digest", now - 0.5)  # a check from a shell: no sleep's
    code, out, _ = cli("--config", str(conf), "restore", "--json")
    doc = json.loads(out)
    assert (code, doc["held"]) == (3, []), doc  # the older stop's start tried: no systemd here
    assert [(d["device"], d["reason"]) for d in doc["health"]["final"]["devices"]
            if d["device"] == "npu 0"] == [("npu 0", "npu-smi health Alarm, as before the suspend")]
    with History.open(str(tmp_path / "state"), readonly=True) as h:
        assert [e.phase for e in h.attempt(look).events] == ["health"]


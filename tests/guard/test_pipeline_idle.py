"""The device's own view folded into the verdict, through the real npu-smi backend
(a fake npu-smi executable printing recorded-format text)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES, FIXTURES
from helpers.holders import Holders
from helpers.runners import guard

from suspendguard.config import IdleConfig
from suspendguard.idle.npusmi import NpuSmiBackend
from suspendguard.idle.sampler import check_idle
from suspendguard.system.deadline import Deadline

FAKE_NPU_SMI = FAKES / "idle" / "npu-smi"
TEMPLATE = (FIXTURES / "npu-smi" / "910b2c-hbm-one-process.txt").read_text()


def npu_smi_text(pid: int | None, aicore: int = 0) -> str:
    """The recorded 910B2C frame with our own pid (or no process) in its process table."""
    text = TEMPLATE.replace("| 0                         | 0000:5A:00.0  | 0 ",
                            f"| 0                         | 0000:5A:00.0  | {aicore} ")
    if pid is None:
        lines = text.splitlines()
        head = [ln for ln in lines if "124528" not in ln]
        return "\n".join(head) + "\n"
    return text.replace("124528", str(pid).ljust(6))


def plain_file(tmp_path: Path, name: str = "not-a-node") -> str:
    """A file a job holds open that is no node the guard knows: what it holds is the device's
    word alone."""
    path = tmp_path / name
    path.write_bytes(b"")
    return str(path)


def idle_via_npu_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, texts: list[str]) -> Any:
    """An idle check that uses the real npu-smi backend; each query prints the next text."""
    files = []
    for i, text in enumerate(texts):
        f = tmp_path / f"info-{i}.txt"
        f.write_text(text)
        files.append(f)
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(files[0]))
    calls = {"n": 0}

    def check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> Any:
        monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(files[min(calls["n"], len(files) - 1)]))
        calls["n"] += 1
        cfg = replace(config, npu_smi=str(FAKE_NPU_SMI), backends=("npu-smi",), samples=1,
                      interval_ms=10, settle_s=0.3)
        return check_idle(cfg, ["ascend"], deadline, backends=[NpuSmiBackend(cfg)])

    return check


@pytest.mark.parametrize("holds", ["nothing", "management"])
def test_device_reported_pid_unknown_to_the_scan_is_drained(
        make_config: Any, holders: Holders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        holds: str) -> None:
    # A job the scan cannot see through a node (it holds none here: think of a container
    # the guard could not read), or sees hold davinci_manager alone (its compute node one
    # the guard does not know, say), but the device lists: the device's word decides.
    held = plain_file(tmp_path, "davinci_manager" if holds == "management" else "not-a-node")
    proc, pid = holders.start(held)
    check = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(pid), npu_smi_text(None)])
    devices = {"management": [held]} if holds == "management" else {}
    report = guard(make_config(devices=devices), idle_check=check)
    [hr] = [h for h in report.holders if h.decision.holder.pid == pid]
    assert (hr.decision.action, hr.decision.rule) == ("drain", "reported by the device (npu-smi)")
    assert hr.outcome.kind == "exited", hr.outcome
    assert report.verdict.kind == "allow", report.verdict.texts
    assert proc.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]


def test_a_pid_the_device_reported_that_a_newer_process_took_is_never_signalled(
        make_config: Any, holders: Holders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The device listed a process that ended, and its pid went to another before the guard
    # looked: that one started after the reading, so it cannot be what the device saw.
    other = plain_file(tmp_path)
    reading = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(4242)])
    late: list[int] = []

    def check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> Any:
        report = reading(config, families, deadline)
        time.sleep(0.1)  # a pid is taken again some ticks later, at the soonest
        _, pid = holders.start(other)
        late.append(pid)
        return replace(report, devices=tuple(
            replace(d, processes=tuple(replace(p, pid=pid) for p in d.processes))
            for d in report.devices))

    report = guard(make_config(), idle_check=check)
    assert late and holders.signals() == [], holders.signals()
    assert report.verdict.kind == "veto"
    assert [r.code for r in report.verdict.reasons] == ["device-hidden-holder"]
    assert f"reports pid {late[0]}" in report.verdict.texts[0]


def test_device_reported_pid_in_dry_run_is_predicted_not_signalled(
        make_config: Any, holders: Holders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = plain_file(tmp_path)
    proc, pid = holders.start(other)
    check = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(pid)])
    report = guard(make_config(), dry_run=True, idle_check=check)
    [hr] = [h for h in report.holders if h.decision.holder.pid == pid]
    assert hr.outcome.kind == "would-signal"
    assert holders.signals() == [] and proc.poll() is None


def test_busy_device_with_no_visible_job_vetoes(
        make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(None, aicore=37)])
    report = guard(make_config(), idle_check=check)
    assert report.verdict.kind == "veto"
    assert any("AI Core 37%" in r for r in report.verdict.texts), report.verdict.texts
    assert report.to_json()["idle"]["state"] == "busy"


def test_device_pid_not_visible_here_vetoes(
        make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer exists: the device sees what this host cannot
    check = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(dead.pid)])
    report = guard(make_config(), idle_check=check)
    assert report.verdict.kind == "veto"
    assert any(f"reports pid {dead.pid}" in r and "not visible here" in r
               for r in report.verdict.texts)
    # Gone or elsewhere, this host cannot tell: the reason names both, and what to do.
    assert any("or it ended just as the device was read: check again" in r
               for r in report.verdict.texts)


def test_hung_npu_smi_never_exceeds_the_deadline(make_config: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    check = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(None)])
    monkeypatch.setenv("FAKE_NPU_SMI_MODE", "hang")
    cfg = make_config(drain={"timeout_s": 1, "deadline_s": 10})
    # Validation refuses a query timeout past the deadline; handed one anyway,
    # the pipeline must still answer in time.
    cfg = replace(cfg, drain=replace(cfg.drain, deadline_s=4),
                  idle=replace(cfg.idle, command_timeout_s=30))
    started = time.monotonic()
    report = guard(cfg, idle_check=check)
    assert time.monotonic() - started < 4 + 5  # the deadline, plus a generous margin
    assert report.to_json()["idle"]["state"] == "unknown"


def test_a_backend_hung_before_the_drain_leaves_the_family_to_the_others(
        make_config: Any, holders: Holders, node: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pyACL hangs for the whole first reading, which left npu-smi no time: that is not "no
    backend can answer". The job is drained, and npu-smi answers idle after the drain."""
    import json

    from suspendguard.idle.acl import AclBackend

    acl_state = tmp_path / "acl.json"
    acl_state.write_text(json.dumps({"mode": "hang", "devices": []}))
    monkeypatch.setenv("FAKE_ACL_STATE", str(acl_state))
    info = tmp_path / "info.txt"
    info.write_text(npu_smi_text(None))
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(info))

    def check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> Any:
        cfg = replace(config, npu_smi=str(FAKE_NPU_SMI),
                      ascend_env=str(FAKES / "idle" / "acl_site" / "set_env.sh"))
        return check_idle(cfg, ["ascend"], deadline,
                          backends=[AclBackend(cfg), NpuSmiBackend(cfg)])

    proc, pid = holders.start(node)
    cfg = make_config(idle={"command_timeout_s": 1.0, "samples": 1, "settle_s": 0.5,
                            "interval_ms": 10})
    report = guard(cfg, idle_check=check)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert proc.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]
    idle = report.to_json()["idle"]
    assert idle["state"] == "idle"
    assert {b["name"]: b["available"] for b in idle["backends"]} == {"acl": False,
                                                                     "npu-smi": True}


def test_npu_smi_health_before_the_suspend_is_kept_for_the_check_after_resume(
        make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 310B4 edge board reads Alarm in plain use (a recorded capture): the guard keeps that
    word with the attempt, and after resume the same Alarm does not hold the jobs back."""
    from suspendguard.health import ascend
    from suspendguard.store.history import History

    edge = (FIXTURES / "npu-smi" / "310b4-edge-no-process-table.txt").read_text()
    config = make_config(idle={"npu_smi": str(FAKE_NPU_SMI)})
    report = guard(config, idle_check=idle_via_npu_smi(tmp_path, monkeypatch, [edge]))
    assert report.verdict.kind == "allow", report.verdict.texts
    with History.open(config.state.dir) as history:
        before = history.health_before(report.attempt.id)
    assert before == {"npu 0": "Alarm"}
    found, _ = ascend.npu_smi_check(config, 5.0, before)
    assert [(d.device, d.state, d.reason) for d in found] == [
        ("npu 0", "healthy", "npu-smi health Alarm, as before the suspend")]
    found, _ = ascend.npu_smi_check(config, 5.0)  # no word kept: as before this was kept
    assert [(d.device, d.state) for d in found] == [("npu 0", "unhealthy")]


def test_a_slurm_node_awake_judges_npu_smi_health_against_the_word_before_the_suspend(
        make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Slurm node's check after a wake compares too: the 310B4 edge board's Alarm, read
    before the suspend as after, lets the node back; Alarm after OK, or no word kept, does not."""
    import time

    from suspendguard.slurm import node

    edge = (FIXTURES / "npu-smi" / "310b4-edge-no-process-table.txt").read_text()
    config = make_config(idle={"npu_smi": str(FAKE_NPU_SMI)})
    awake = make_config(idle={"npu_smi": str(FAKE_NPU_SMI)}, devices={"families": ["ascend"]})
    alarm = tmp_path / "alarm.txt"
    alarm.write_text(edge)

    def wake() -> dict[str, Any]:
        monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(alarm))
        return node.awake(awake, {}, time.time())

    assert wake()["verdict"] == "veto"  # no attempt recorded: as before words were kept
    ok = edge.replace("| Alarm ", "| OK    ")
    assert guard(config, idle_check=idle_via_npu_smi(tmp_path, monkeypatch, [ok])
                 ).verdict.kind == "allow"
    doc = wake()
    assert doc["verdict"] == "veto", doc
    assert "npu-smi health Alarm (before the suspend: OK)" in doc["summary"], doc
    assert guard(config, idle_check=idle_via_npu_smi(tmp_path, monkeypatch, [edge])
                 ).verdict.kind == "allow"
    doc = wake()
    assert doc["verdict"] == "allow", doc
    assert "npu-smi health Alarm, as before the suspend" in doc["summary"], doc


def test_a_slurm_node_awake_whose_npu_smi_fails_answers_unknown_never_allow(
        make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No npu-smi, and pyACL's ``acl`` cannot be imported: nothing said whether the chip is
    fit, so the answer is unknown with its code, not the allow a device with no answer used
    to get. A pyACL child that dies says the device does not open: a veto."""
    import json
    import time

    from suspendguard.slurm import node

    no_cann = tmp_path / "set_env.sh"
    no_cann.write_text("export SOMETHING=1\n")
    acl_state = tmp_path / "acl.json"
    acl_state.write_text(json.dumps({"mode": "crash", "devices": []}))
    monkeypatch.setenv("FAKE_ACL_STATE", str(acl_state))

    def awake(ascend_env: Path) -> dict[str, Any]:
        config = make_config(idle={"npu_smi": str(tmp_path / "no-npu-smi"),
                                   "ascend_env": str(ascend_env)},
                             devices={"families": ["ascend"]})
        return node.awake(config, {}, time.time())

    doc = awake(no_cann)
    assert doc["verdict"] == "unknown", doc
    assert [d["code"] for d in doc["reason_details"]] == ["health-unknown"], doc
    assert doc["reasons"][0].startswith("device ascend unknown: "), doc
    doc = awake(FAKES / "idle" / "acl_site" / "set_env.sh")
    assert doc["verdict"] == "veto", doc
    assert doc["reasons"][0] == "device ascend unhealthy: pyACL probe: killed by SIGSEGV", doc
    acl_state.write_text(json.dumps({"devices": [{"ret": 0}], "open": [0]}))
    assert awake(FAKES / "idle" / "acl_site" / "set_env.sh")["verdict"] == "allow"  # answered


def test_no_health_word_is_kept_for_a_suspend_that_did_not_happen(
        make_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A veto (or an unknown) is no suspend: the Alarm read then, after a suspend that left the
    chip at OK, must not let a later check take that Alarm as the word from before the suspend;
    a dry run keeps none either, but the veto unit's look in observe mode does."""
    import time

    from suspendguard.slurm import node
    from suspendguard.store.history import History

    edge = (FIXTURES / "npu-smi" / "310b4-edge-no-process-table.txt").read_text()
    ok = edge.replace("| Alarm ", "| OK    ")
    busy = edge.replace("| 0            3628", "| 95           3628")  # AI Core 95 %
    config = make_config(idle={"npu_smi": str(FAKE_NPU_SMI)})
    awake = make_config(idle={"npu_smi": str(FAKE_NPU_SMI)}, devices={"families": ["ascend"]})
    assert guard(config, idle_check=idle_via_npu_smi(tmp_path, monkeypatch, [ok])
                 ).verdict.kind == "allow"
    vetoed = guard(config, idle_check=idle_via_npu_smi(tmp_path, monkeypatch, [busy]))
    assert vetoed.verdict.kind == "veto", vetoed.verdict.texts
    dry = guard(config, dry_run=True, record=True,
                idle_check=idle_via_npu_smi(tmp_path, monkeypatch, [edge]))
    with History.open(config.state.dir) as history:
        assert history.health_before(vetoed.attempt.id) == {}
        assert history.health_before(dry.attempt.id) == {}
    alarm = tmp_path / "alarm.txt"
    alarm.write_text(edge)
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(alarm))
    doc = node.awake(awake, {}, time.time())
    assert doc["verdict"] == "veto", doc
    # The veto unit's look in observe mode refuses nothing: the suspend follows it, veto or
    # not, so its words are the ones from before the suspend.
    observed = guard(config, dry_run=True, record=True, origin="unit",
                     idle_check=idle_via_npu_smi(tmp_path, monkeypatch, [busy]))
    assert observed.verdict.kind == "veto", observed.verdict.texts
    with History.open(config.state.dir) as history:
        assert history.health_before(observed.attempt.id) == {"npu 0": "Alarm"}
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(alarm))
    assert node.awake(awake, {}, time.time())["verdict"] == "allow"



def test_drain_lists_a_holder_only_the_device_reports_and_the_confirmed_run_signals_it(
        make_config: Any, holders: Holders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # drain's question is a dry run: it asks the device as the real run does, so a job
    # the scan cannot see is on the list, and the run confirmed with that list stops it
    # (left off, the real run vetoed it as "appeared after the list was confirmed").
    import io

    from suspendguard.commands.context import Context
    from suspendguard.commands.drain import to_signal

    other = plain_file(tmp_path)
    proc, pid = holders.start(other)
    reading = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(pid)])

    def check(config: IdleConfig, families: Sequence[str], deadline: Deadline) -> Any:
        report = reading(config, families, deadline)  # the device lists the job while it runs
        if proc.poll() is not None:
            return replace(report, devices=tuple(replace(d, processes=())
                                                 for d in report.devices))
        return report

    config = make_config()
    listed = to_signal(config, Context(None, io.StringIO(), io.StringIO(), {}), idle_check=check)
    assert [key[0] for key in listed] == [pid]
    assert holders.signals() == [] and proc.poll() is None
    report = guard(config, idle_check=check, confirmed=set(listed))
    assert report.verdict.kind == "allow", report.verdict.texts
    assert proc.wait(timeout=5) == 0 and holders.signals() == [f"{pid} SIGINT"]


def test_a_holder_an_ignore_rule_names_stays_ignored_whatever_the_device_lists(
        make_config: Any, holders: Holders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The operator's [policy] ignore rule is no built-in guess from the nodes held: it stands.
    manager = plain_file(tmp_path, "davinci_manager")
    proc, pid = holders.start(manager, mode="deaf")
    check = idle_via_npu_smi(tmp_path, monkeypatch, [npu_smi_text(pid)])
    report = guard(make_config(devices={"management": [manager]},
                               policy={"ignore": [{"cmdline": "--mode deaf"}]}), idle_check=check)
    [hr] = [h for h in report.holders if h.decision.holder.pid == pid]
    assert hr.decision.action == "ignore" and hr.decision.rule.startswith("[policy] ignore #1")
    assert holders.signals() == [] and proc.poll() is None

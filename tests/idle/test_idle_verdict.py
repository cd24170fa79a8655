"""check_idle: sampling until readings settle, and the verdict with its reasons.

Most tests drive scripted backends on a fake clock, so they are exact and
instant; the npu-smi ones run the fake tool for real.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import TESTS

from suspendguard.config import IDLE_BACKENDS, IdleConfig, defaults, trust
from suspendguard.config.schema import SCHEMA
from suspendguard.guard.device_view import default_idle_check
from suspendguard.idle.base import (
    Backend,
    DeviceProcess,
    DeviceReading,
    IdleReport,
    QueryFailed,
    judge,
)
from suspendguard.idle.npusmi import NpuSmiBackend
from suspendguard.idle.sampler import BACKEND_TYPES, check_idle, make_backends
from suspendguard.system.deadline import Cancel, Deadline, bounded

HERE = TESTS
RECORDED = HERE / "fixtures" / "npu-smi"
FAKE_NPU_SMI = HERE / "fakes" / "idle" / "npu-smi"
DRAIN = json.loads((HERE / "fixtures" / "nvidia-h200" / "drain-timing.json").read_text())

Answer = dict[str, dict[str, "float | None"]]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Scripted(Backend):
    """A backend whose devices read what ``script(t)`` says at fake time t."""

    def __init__(self, config: IdleConfig, name: str, family: str,
                 script: Callable[[float], dict[str, dict[str, float | None]] | Exception],
                 clock: Clock, probe: tuple[bool, str] = (True, "scripted"),
                 cost_s: float = 0.0,
                 processes: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(config)
        self.name, self.family = name, family  # type: ignore[assignment]
        self.script, self.clock, self._probe, self.cost_s = script, clock, probe, cost_s
        self.procs = processes
        self.asked: list[float] = []

    def probe(self) -> tuple[bool, str]:
        return self._probe

    def query(self, timeout_s: float) -> list[DeviceReading]:
        self.asked.append(self.clock.now - 1000.0)
        answer = self.script(self.clock.now - 1000.0)
        self.clock.now += self.cost_s
        if isinstance(answer, Exception):
            raise answer
        return [
            self.reading(dev, values, tuple(
                DeviceProcess(pid, "python3", 10.0, dev, self.name)
                for pid, on in self.procs if on == dev))
            for dev, values in answer.items()
        ]


def config(**kw: object) -> IdleConfig:
    base = replace(defaults().idle, samples=3, interval_ms=200, settle_s=3.0,
                               busy_threshold=0.0, on_unknown="allow")
    return replace(base, **kw)  # type: ignore[arg-type]


def run(cfg: IdleConfig, families: Sequence[str], backends: Sequence[Backend], clock: Clock,
        budget: float = 60.0) -> IdleReport:
    return check_idle(cfg, families, Deadline(clock.now + budget, clock=clock), backends=backends,
                      sleep=clock.sleep)


def steady(**devices: float | None) -> Callable[[float], dict[str, dict[str, float | None]]]:
    return lambda t: {dev.replace("_", " "): {"aicore_pct": v} for dev, v in devices.items()}


def test_busy_utilization_vetoes_after_the_settle_time() -> None:
    clock = Clock()
    npu = Scripted(config(), "npu-smi", "ascend", steady(npu_0=37.0), clock,
                   processes=[(4242, "npu 0")])
    report = run(config(), ["ascend"], [npu], clock)
    assert report.state == "busy"
    assert report.veto_reasons == ("npu 0 (npu-smi): AI Core 37% > 0% after 3.0 s settle",)
    assert 3.0 <= npu.asked[-1] < 3.0 + 0.2 + 1e-9  # gave up as soon as settle ran out
    assert [p.pid for p in report.processes()] == [4242]


def test_sampling_ends_when_the_guard_is_stopped_and_the_device_is_not_called_idle() -> None:
    """SIGTERM to the guard (its Cancel) ends the settle at once, deadline or not."""
    clock = Clock()
    cancel = Cancel()
    npu = Scripted(config(), "npu-smi", "ascend", steady(npu_0=37.0), clock)

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if len(npu.asked) == 2:
            cancel.cancel("SIGTERM")

    try:
        report = check_idle(config(), ["ascend"], Deadline(clock.now + 60, cancel, clock),
                            backends=[npu], sleep=sleep)
    finally:
        cancel.close()
    assert len(npu.asked) == 2  # not one query after the cancel
    assert report.state == "busy"  # its last word; a stop proves nothing idle
    assert clock.now - 1000.0 < 1.0


def test_nvml_lag_from_the_real_h200_settles_to_idle() -> None:
    """Replays drain-timing.json: 2-7 % for up to 0.4 s after the last exit."""
    for trial in DRAIN.values():
        samples = [(t, util) for t, _procs, util in trial["samples"]]

        def util_at(t: float, samples: list[tuple[float, int]] = samples) -> Answer:
            value = [u for at, u in samples if at <= t + 1e-9][-1]
            return {"gpu 0": {"gpu_pct": float(value), "gpu_memory_pct": 0.0}}

        clock = Clock()
        gpu = Scripted(config(), "nvml", "nvidia", util_at, clock)
        report = run(config(), ["nvidia"], [gpu], clock)
        assert report.state == "idle", report
        assert report.veto_reasons == () and report.warnings == ()
        # a single reading taken right after the drain would have vetoed
        assert util_at(0.0)["gpu 0"]["gpu_pct"] or util_at(0.1)["gpu 0"]["gpu_pct"]
        # idle once `samples` consecutive readings are idle, not before
        assert len(gpu.asked) >= 3


def test_lagging_reading_is_not_busy_before_settle_but_busy_after() -> None:
    clock = Clock()
    lag = Scripted(config(), "npu-smi", "ascend",
                   lambda t: {"npu 0": {"aicore_pct": 5.0 if t < 1.0 else 0.0}}, clock)
    assert run(config(), ["ascend"], [lag], clock).state == "idle"
    clock = Clock()
    lag = Scripted(config(settle_s=0.5), "npu-smi", "ascend",
                   lambda t: {"npu 0": {"aicore_pct": 5.0 if t < 1.0 else 0.0}}, clock)
    report = run(config(settle_s=0.5), ["ascend"], [lag], clock)
    assert report.state == "busy"
    assert report.veto_reasons == ("npu 0 (npu-smi): AI Core 5% > 0% after 0.5 s settle",)


def test_threshold_and_samples_are_respected() -> None:
    clock = Clock()
    low = Scripted(config(), "nvml", "nvidia", lambda t: {"gpu 0": {"gpu_pct": 2.0}}, clock)
    report = run(config(busy_threshold=5.0, samples=5), ["nvidia"], [low], clock)
    assert report.state == "idle"
    assert len(low.asked) == 5
    assert clock.slept == [0.2] * 4


@pytest.mark.parametrize(("on_unknown", "vetoed"), [("allow", False), ("veto", True)])
def test_no_backend_can_answer_follows_on_unknown(on_unknown: str, vetoed: bool) -> None:
    clock = Clock()
    cfg = config(on_unknown=on_unknown)
    dead = [
        Scripted(cfg, "acl", "ascend", steady(), clock, probe=(False, "no CANN set_env.sh found")),
        Scripted(cfg, "npu-smi", "ascend", steady(), clock, probe=(False, "npu-smi: not found on PATH")),
    ]
    report = run(cfg, ["ascend"], dead, clock)
    assert report.state == "unknown"
    text = ("ascend: no idle backend could answer (acl: no CANN set_env.sh found; "
            "npu-smi: not found on PATH)")
    if vetoed:
        assert report.veto_reasons == (f"{text}; vetoed by [idle] on_unknown = veto",)
        assert report.warnings == ()
    else:
        assert report.veto_reasons == ()
        assert report.warnings == (f"{text}; allowed by [idle] on_unknown = allow",)
    assert [(b.name, b.available) for b in report.backends] == [("acl", False), ("npu-smi", False)]
    assert all(not b.asked for b in dead)


def test_no_accelerator_is_none_not_an_error() -> None:
    clock = Clock()
    never = Scripted(config(), "nvml", "nvidia", steady(), clock)
    for families in ([], ["extra"]):
        report = run(config(), families, [never], clock)
        assert (report.state, report.veto_reasons) == ("none", ())
        assert report.warnings == ("no accelerator found",)
        assert report.to_json()["state"] == "none"
    assert never.asked == []


def test_backend_answering_unknown_is_not_asked_again() -> None:
    clock = Clock()
    failing = Scripted(config(), "acl", "ascend",
                       lambda t: QueryFailed("pyACL probe: killed by SIGSEGV"), clock)
    unsupported = Scripted(config(), "dcmi", "ascend", steady(npu_0=None), clock)
    working = Scripted(config(), "npu-smi", "ascend", steady(npu_0=0.0), clock)
    report = run(config(), ["ascend"], [failing, unsupported, working], clock)
    assert len(failing.asked) == 1 and len(unsupported.asked) == 1
    assert len(working.asked) == 3
    assert report.state == "idle"  # npu-smi answered for every device it sees
    status = {b.name: b for b in report.backends}
    assert status["acl"] == dataclasses.replace(status["acl"], available=False,
                                                reason="acl: pyACL probe: killed by SIGSEGV")
    states = {(d.source, d.id): d.state for d in report.devices}
    assert states == {("dcmi", "npu 0"): "unknown", ("npu-smi", "npu 0"): "idle"}


def test_only_unsupported_readings_are_unknown_never_busy() -> None:
    clock = Clock()
    report = run(config(on_unknown="veto"), ["ascend"],
                 [Scripted(config(), "dcmi", "ascend", steady(npu_0=None), clock)], clock)
    assert (report.state, report.veto_reasons) == ("unknown", (
        "ascend: no idle backend could answer (npu 0 (dcmi): no utilization reading "
        "(not supported)); vetoed by [idle] on_unknown = veto",))


def test_device_that_disappears_is_unknown() -> None:
    clock = Clock()
    vanishing = Scripted(config(), "npu-smi", "ascend",
                         lambda t: {"npu 0": {"aicore_pct": 0.0}} if t < 0.1 else
                         {"npu 1": {"aicore_pct": 0.0}}, clock)
    report = run(config(), ["ascend"], [vanishing], clock)
    assert report.state == "unknown"
    assert "npu 0 (npu-smi): no longer reported by npu-smi" in report.warnings[0]
    assert clock.now - 1000.0 < 1.0


def test_busy_device_that_falls_silent_stays_busy_whatever_another_backend_says() -> None:
    """Its last word was busy: no longer listed, or read as "not supported", proves nothing."""
    for later in ({"npu 0": {"aicore_pct": 0.0}},
                  {"npu 0": {"aicore_pct": 0.0}, "npu 1": {"aicore_pct": None}}):
        clock = Clock()
        npu = Scripted(config(), "npu-smi", "ascend",
                       lambda t, later=later: {"npu 0": {"aicore_pct": 0.0},
                                               "npu 1": {"aicore_pct": 87.0}} if t < 0.1 else later,
                       clock)
        acl = Scripted(config(), "acl", "ascend",
                       steady(device_0=0.0, device_1=0.0), clock)
        report = run(config(), ["ascend"], [acl, npu], clock)
        assert report.state == "busy", report
        [why] = report.veto_reasons
        assert why.startswith("npu 1 (npu-smi): AI Core 87% > 0% when ")
        assert clock.now - 1000.0 < 1.0


def test_a_crashing_backend_is_unknown_not_a_crash() -> None:
    clock = Clock()
    buggy = Scripted(config(), "nvml", "nvidia", lambda t: KeyError("gpu"), clock)
    report = run(config(), ["nvidia"], [buggy], clock)
    assert report.state == "unknown"
    assert "nvml: unexpected error: KeyError" in report.warnings[0]


def test_deadline_cuts_the_settle() -> None:
    clock = Clock()
    busy = Scripted(config(), "nvml", "nvidia", lambda t: {"gpu 0": {"gpu_pct": 100.0}}, clock)
    report = run(config(), ["nvidia"], [busy], clock, budget=1.0)
    assert report.state == "busy"
    assert report.veto_reasons == ("gpu 0 (nvml): GPU 100% > 0% still busy at the deadline (1.0 s)",)
    assert clock.now <= 1001.0

    clock = Clock()
    settling = Scripted(config(), "nvml", "nvidia",
                        lambda t: {"gpu 0": {"gpu_pct": 3.0 if t < 0.5 else 0.0}}, clock)
    report = run(config(), ["nvidia"], [settling], clock, budget=0.7)
    assert report.state == "unknown"
    assert "idle for 1 of 3 samples" in report.warnings[0]


def test_each_query_gets_at_most_what_is_left() -> None:
    clock = Clock()
    seen: list[float] = []

    class Slow(Scripted):
        def query(self, timeout_s: float) -> list[DeviceReading]:
            seen.append(timeout_s)
            return super().query(timeout_s)

    slow = Slow(config(command_timeout_s=5.0), "npu-smi", "ascend",
                lambda t: {"npu 0": {"aicore_pct": 9.0}}, clock, cost_s=0.4)
    run(config(command_timeout_s=5.0), ["ascend"], [slow], clock, budget=1.5)
    assert seen[0] == 1.5
    assert all(s <= 1.5 for s in seen) and seen == sorted(seen, reverse=True)
    assert clock.now <= 1001.5 + 0.4  # only a query already running may pass it


def test_families_pick_the_backends() -> None:
    clock = Clock()
    npu = Scripted(config(), "npu-smi", "ascend", steady(npu_0=0.0), clock)
    gpu = Scripted(config(), "nvml", "nvidia", lambda t: {"gpu 0": {"gpu_pct": 40.0}}, clock)
    report = run(config(), ["ascend"], [npu, gpu], clock)
    assert report.state == "idle" and gpu.asked == []
    assert {b.name: b.reason for b in report.backends}["nvml"] == \
        "not needed: no nvidia device found"

    clock = Clock()
    npu.clock = gpu.clock = clock
    report = run(config(), ["ascend", "nvidia"], [npu, gpu], clock)
    assert report.state == "busy"
    assert report.veto_reasons == ("gpu 0 (nvml): GPU 40% > 0% after 3.0 s settle",)


def test_report_json_shape() -> None:
    clock = Clock()
    npu = Scripted(config(), "npu-smi", "ascend", steady(npu_0=12.0), clock,
                   processes=[(4242, "npu 0")])
    data = run(config(), ["ascend"], [npu], clock).to_json()
    json.dumps(data)
    assert set(data) >= {"state", "devices", "backends"}
    [device] = data["devices"]
    assert set(device) >= {"id", "state", "source", "readings", "processes"}
    assert device["processes"] == [{"pid": 4242, "name": "python3", "memory_mb": 10.0,
                                     "device": "npu 0", "source": "npu-smi", "kind": "compute"}]
    assert data["backends"] == [{"name": "npu-smi", "available": True, "reason": "scripted"}]


# --- the real fake npu-smi ------------------------------------------------


@pytest.fixture
def npu_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the fake npu-smi prints for `info`; tests copy fixtures over it."""
    info = tmp_path / "info.txt"
    monkeypatch.setenv("FAKE_NPU_SMI_INFO", str(info))
    monkeypatch.delenv("FAKE_NPU_SMI_MODE", raising=False)
    monkeypatch.delenv("FAKE_NPU_SMI_LOG", raising=False)
    return info


def npu_config(**kw: object) -> IdleConfig:
    return config(npu_smi=str(FAKE_NPU_SMI), backends=("npu-smi",), **kw)


def test_npu_smi_busy_chips_settle_after_drain(npu_smi: Path) -> None:
    busy = (RECORDED / "310p3-two-chips-blank-process-names.txt").read_text()
    # the same board once its AI Core averages have dropped
    idle = busy.replace("| 38           ", "| 0            ").replace("| 41   ", "| 0    ")
    assert idle != busy and "| 41" not in idle
    npu_smi.write_text(busy)
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now - 1000.0 >= 0.4:  # the AI Core average drops after 0.4 s
            npu_smi.write_text(idle)

    cfg = npu_config()
    report = check_idle(cfg, ["ascend"], Deadline(clock.now + 60, clock=clock), sleep=sleep)
    assert report.state == "idle"
    assert clock.now - 1000.0 >= 0.4 + 2 * 0.2
    # the first reading listed processes: they are kept for the holder list
    assert sorted({p.pid for p in report.processes()}) == [326429, 326430]
    assert {b.name: b.available for b in report.backends} == {"npu-smi": True}


def test_npu_smi_still_busy_vetoes(npu_smi: Path) -> None:
    shutil.copy(RECORDED / "310p3-two-chips-blank-process-names.txt", npu_smi)
    clock = Clock()
    report = check_idle(npu_config(settle_s=1.0), ["ascend"], Deadline(clock.now + 60, clock=clock),
                        sleep=clock.sleep)
    assert report.state == "busy"
    assert report.veto_reasons == (
        "npu 0 chip 0 (npu-smi): AI Core 38% > 0% after 1.0 s settle",
        "npu 0 chip 1 (npu-smi): AI Core 41% > 0% after 1.0 s settle",
    )


@pytest.mark.parametrize("its_processes", ["kept", "gone"])
def test_npu_smi_chip_dropped_from_the_table_while_busy_still_vetoes(npu_smi: Path,
                                                                     its_processes: str) -> None:
    """The recorded 310P3 frame (chip 1 of NPU 0 busy), then the same frame without that chip,
    its process row kept or gone too."""
    busy = (RECORDED / "310p3-two-chips-blank-process-names.txt").read_text()
    busy = busy.replace("| 38           ", "| 0            ")
    lines = busy.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("| 1       1  "))
    lines = lines[:at - 1] + lines[at + 1:]
    if its_processes == "gone":
        lines = [line for line in lines if not line.startswith("| 0       1 ")]
    dropped = "".join(lines)
    npu_smi.write_text(busy)
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        npu_smi.write_text(dropped)

    cfg = npu_config(on_unknown="allow")
    report = check_idle(cfg, ["ascend"], Deadline(clock.now + 60, clock=clock), sleep=sleep)
    assert report.state == "busy", report
    # With its process rows the chip is still named, with no figure.
    assert report.veto_reasons == ((
        "npu 0 chip 1 (npu-smi): AI Core 41% > 0% when it gave no reading any more (no "
        "utilization reading; npu-smi lists processes on this chip but no row of its own in "
        "the chip table)",) if its_processes == "kept" else (
        "npu 0 chip 1 (npu-smi): AI Core 41% > 0% when npu-smi no longer reported it",))
    assert report.warnings == ()


def test_hung_npu_smi_never_outlives_the_deadline(npu_smi: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(RECORDED / "310-atlas300i-idle.txt", npu_smi)
    monkeypatch.setenv("FAKE_NPU_SMI_MODE", "hang")
    cfg = npu_config(command_timeout_s=30.0)
    start = time.monotonic()
    report = check_idle(cfg, ["ascend"], Deadline(start + 1.0))
    elapsed = time.monotonic() - start
    assert elapsed < 1.0 + 4.0  # generous: only the kill and reap may follow the deadline
    assert report.state == "unknown"
    assert "no answer within the timeout" in report.warnings[0]
    assert not report.backends[0].available
    assert "no answer within the timeout" in report.backends[0].reason


def test_the_device_asked_past_the_runs_end_gets_the_time_it_was_given(npu_smi: Path) -> None:
    """The run's time is used up, and the device is asked once more with time of its own
    (Deadline.at_least): npu-smi runs in that time, not killed as soon as it starts."""
    shutil.copy(RECORDED / "310-atlas300i-idle.txt", npu_smi)
    used_up = Deadline(time.monotonic())
    with bounded(used_up):
        report = default_idle_check(npu_config(), ["ascend"], used_up.at_least(10.0))
    assert report.state == "idle", report.warnings
    with bounded(used_up):  # what the run's own bound alone leaves it
        report = default_idle_check(npu_config(), ["ascend"], used_up)
    assert report.state == "unknown"


def test_default_backends_come_from_the_config(npu_smi: Path, tmp_path: Path) -> None:
    shutil.copy(RECORDED / "910b2c-hbm-one-process.txt", npu_smi)
    cfg = config(npu_smi=str(FAKE_NPU_SMI), ascend_env=str(tmp_path / "none.sh"),
                 dcmi_library=str(tmp_path / "none.so"))
    assert [type(b) for b in make_backends(cfg)] == [BACKEND_TYPES[n] for n in cfg.backends]
    clock = Clock()
    report = check_idle(cfg, ["ascend"], Deadline(clock.now + 60, clock=clock), sleep=clock.sleep)
    assert report.state == "idle"
    status = {b.name: b for b in report.backends}
    assert status["npu-smi"].available and not status["acl"].available
    assert not status["dcmi"].available and status["nvml"].reason.startswith("not needed")
    assert [(p.pid, p.device) for p in report.processes()] == [(124528, "npu 0")]
    assert isinstance(make_backends(cfg)[1], NpuSmiBackend)


def test_each_declared_backend_has_one_implementation_and_keys_of_its_own() -> None:
    assert list(BACKEND_TYPES) == list(IDLE_BACKENDS)
    for name, backend in BACKEND_TYPES.items():
        assert (backend.name, backend.family) == (name, IDLE_BACKENDS[name].family)
    keys = [key for declared in IDLE_BACKENDS.values() for key in declared.keys]
    assert len(keys) == len(set(keys)) and set(keys) <= set(SCHEMA["idle"])
    # What root runs, sources or loads for a backend is held to the trust rule.
    assert set(trust.PROGRAM_KEYS) == set(keys)


def test_backend_that_falls_silent_while_busy_still_vetoes() -> None:
    clock = Clock()
    silent = Scripted(config(), "npu-smi", "ascend",
                      lambda t: {"npu 0": {"aicore_pct": 37.0}} if t < 0.1 else
                      QueryFailed("npu-smi: no answer within the timeout (killed)"), clock)
    report = run(config(), ["ascend"], [silent], clock)
    assert report.state == "busy"
    assert report.veto_reasons == (
        "npu 0 (npu-smi): AI Core 37% > 0% when npu-smi stopped answering "
        "(npu-smi: no answer within the timeout (killed))",)


def test_a_device_called_idle_that_reads_busy_later_is_busy() -> None:
    # Its backend is asked on while another device of its settles: the newer word counts.
    clock = Clock()
    gpus = Scripted(config(), "nvml", "nvidia",
                    lambda t: {"gpu 0": {"gpu_pct": 0.0 if t < 0.5 else 90.0},
                               "gpu 1": {"gpu_pct": 50.0 if t < 2.0 else 0.0}}, clock)
    report = run(config(), ["nvidia"], [gpus], clock)
    assert report.state == "busy", report
    [why] = report.veto_reasons
    assert why.startswith("gpu 0 (nvml): GPU 90% > 0%"), why


def test_a_device_called_idle_that_is_no_longer_listed_is_unknown() -> None:
    clock = Clock()
    gpus = Scripted(config(), "nvml", "nvidia",
                    lambda t: {"gpu 0": {"gpu_pct": 0.0}, "gpu 1": {"gpu_pct": 50.0}} if t < 1.0
                    else {"gpu 1": {"gpu_pct": 50.0 if t < 2.0 else 0.0}}, clock)
    report = run(config(), ["nvidia"], [gpus], clock)
    assert report.state == "unknown", report
    assert any("gpu 0 (nvml): no longer reported by nvml" in w for w in report.warnings), report


@pytest.mark.parametrize(("families", "state"), [
    (["ascend", "ascend"], "unknown"),  # two chips found, one listed
    (["ascend"], "idle"),
])
def test_a_backend_listing_fewer_devices_than_were_found_cannot_call_them_idle(
        families: list[str], state: str) -> None:
    clock = Clock()
    npu = Scripted(config(), "npu-smi", "ascend", steady(npu_0=0.0), clock)
    report = run(config(), families, [npu], clock)
    assert report.state == state, report
    if state == "unknown":
        assert report.unknown == (("ascend", "ascend: no idle backend could answer (npu-smi "
                                   "reports 1 of the 2 devices found); vetoed by [idle] "
                                   "on_unknown = veto"),)


@pytest.mark.parametrize(("readings", "state", "why"), [
    ({"gpu_pct": None, "gpu_memory_pct": 0.0}, "unknown",
     "no utilization reading of the compute units (GPU memory controller only)"),
    ({"aicore_pct": None, "vector_pct": 0.0}, "unknown",
     "no utilization reading of the compute units (AI Core vector only)"),
    ({"gpu_pct": float("nan")}, "unknown", "no utilization reading (not supported)"),
    ({"aicore_pct": None, "vector_pct": 12.0}, "busy", ""),  # work shows in any figure
    ({"cube_pct": 0.0, "vector_pct": 0.0}, "idle", ""),  # pyACL's figures
    ({"gpu_pct": 0.0, "gpu_memory_pct": None}, "idle", ""),
])
def test_idle_needs_a_figure_of_the_compute_units_themselves(
        readings: dict[str, float | None], state: str, why: str) -> None:
    assert judge(readings, 0.0) == (state, why)

"""A backend whose query time the ones asked before it took: unasked, not "cannot answer".

Backends on a fake clock, so the times are exact: each query costs what it is told to,
and one that hangs costs all the time it was given, then fails as a killed tool does.
"""

from __future__ import annotations

from dataclasses import replace

from suspendguard.config import IdleConfig, defaults
from suspendguard.idle.base import Backend, DeviceReading, IdleReport, QueryFailed
from suspendguard.idle.sampler import check_idle
from suspendguard.system.deadline import Deadline

CONFIG = replace(defaults().idle, samples=1, settle_s=0.0, interval_ms=10, command_timeout_s=1.0,
                 busy_threshold=0.0, on_unknown="veto")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Timed(Backend):
    """Answers idle after ``cost_s`` of the clock, or (``hangs``) uses all it is given and fails."""

    def __init__(self, config: IdleConfig, name: str, family: str, clock: Clock,
                 cost_s: float = 0.0, hangs: bool = False) -> None:
        super().__init__(config)
        self.name, self.family = name, family  # type: ignore[assignment]
        self.clock, self.cost_s, self.hangs = clock, cost_s, hangs
        self.given: list[float] = []

    def probe(self) -> tuple[bool, str]:
        return True, "timed"

    def query(self, timeout_s: float) -> list[DeviceReading]:
        self.given.append(timeout_s)
        if self.hangs:
            self.clock.now += timeout_s
            raise QueryFailed("no answer within the timeout (killed)")
        self.clock.now += self.cost_s
        return [self.reading("dev 0", {"gpu_pct" if self.family == "nvidia" else "aicore_pct": 0.0})]


def first_reading(*backends: Timed, clock: Clock) -> IdleReport:
    """The reading before the drain: command_timeout_s in all (guard/device_view.ask_first)."""
    return check_idle(CONFIG, [b.family for b in backends],
                      Deadline(clock.now + CONFIG.command_timeout_s, clock=clock),
                      backends=backends, sleep=clock.sleep)


def test_a_backend_killed_in_the_sliver_a_slow_one_left_is_unasked() -> None:
    clock = Clock()
    slow = Timed(CONFIG, "npu-smi", "ascend", clock, cost_s=0.9)
    cut = Timed(CONFIG, "nvml", "nvidia", clock, hangs=True)
    report = first_reading(slow, cut, clock=clock)
    assert len(cut.given) == 1 and abs(cut.given[0] - 0.1) < 1e-9, cut.given
    assert report.unasked == ("nvml",)
    [status] = [b for b in report.backends if b.name == "nvml"]
    assert status.reason == ("nvml: no answer within the timeout (killed) (it had 0.1 s of [idle] "
                             "command_timeout_s = 1 s: the backends asked before it took the rest)")
    assert [family for family, _ in report.unknown] == ["nvidia"]  # unknown, never idle


def test_a_backend_that_hung_with_most_of_its_time_has_answered() -> None:
    """Asked after a quick one, it had nearly all of the reading's time: its timeout is its
    own, a certain "cannot answer", as is that of a backend asked first."""
    clock = Clock()
    quick = Timed(CONFIG, "npu-smi", "ascend", clock, cost_s=0.05)
    hung = Timed(CONFIG, "nvml", "nvidia", clock, hangs=True)
    report = first_reading(quick, hung, clock=clock)
    assert report.unasked == ()
    assert [b.reason for b in report.backends if b.name == "nvml"] == [
        "nvml: no answer within the timeout (killed)"]
    clock = Clock()
    alone = Timed(CONFIG, "nvml", "nvidia", clock, hangs=True)
    assert first_reading(alone, clock=clock).unasked == ()


def test_a_backend_that_fails_at_once_in_its_sliver_has_answered() -> None:
    """A tool that refuses at once (no driver) said so within the time it had: not unasked."""
    clock = Clock()
    slow = Timed(CONFIG, "npu-smi", "ascend", clock, cost_s=0.9)

    class Refusing(Timed):
        def query(self, timeout_s: float) -> list[DeviceReading]:
            raise QueryFailed("driver not loaded")

    refusing = Refusing(CONFIG, "nvml", "nvidia", clock)
    report = first_reading(slow, refusing, clock=clock)
    assert report.unasked == ()
    assert [b.reason for b in report.backends if b.name == "nvml"] == ["nvml: driver not loaded"]

"""``[notify] retry``: which vetoes are retried, and the loop against the fake logind with real holders.

The veto retried is a real one: the pipeline drains a real holder that is
still on its way out when its wait after SIGINT ends. The loop then asks
the fake logind (a real private dbus-daemon) whether it still wants to
sleep, through a lid the test opens by writing a file, and asks it for
the sleep through the fake systemd.
"""

from __future__ import annotations

import io
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import PrivateBus, dbus_daemon, fake_service
from helpers.holders import Holders

from suspendguard.guard.pipeline import run
from suspendguard.guard.ready import dry_look
from suspendguard.guard.report import IdleSkipped, Report
from suspendguard.guard.retry import Retried, no_longer, retry, still_wants, why_not_retried
from suspendguard.model import Inventory, Unavailable
from suspendguard.record import Attempt
from suspendguard.store.history import History
from suspendguard.system.dbus.logind import SleepJob, request_sleep
from suspendguard.system.dbus.wish import LogindWish, logind_wish
from suspendguard.system.log import Logger
from suspendguard.verdict import Reason, Verdict

NOW = 1_700_000_000.0


def attempt(*codes: str, origin: str = "unit", kind: str = "veto") -> Attempt:
    reasons = tuple(Reason(code, f"because {code}", pid=42) for code in codes)  # type: ignore[arg-type]
    return Attempt(id=7, started=NOW - 30, finished=NOW, action="suspend", origin=origin,
                   dry_run=False, verdict=Verdict(kind, reasons), config_digest="")  # type: ignore[arg-type]


@pytest.mark.parametrize("codes", [("timeout-after-sigint",), ("device-busy",),
                                   ("timeout-after-sigint", "device-busy")])
def test_a_veto_whose_causes_end_by_themselves_is_retried(codes: tuple[str, ...]) -> None:
    assert why_not_retried(attempt(*codes)) is None


@pytest.mark.parametrize("codes", [("protected",), ("sigint-ignored",),
                                   ("timeout-after-sigint", "frozen"), ("respawned",), ()])
def test_a_certain_veto_is_never_retried(codes: tuple[str, ...]) -> None:
    why = why_not_retried(attempt(*codes))
    assert why is not None and "does not end by itself" in why


def test_only_the_veto_units_vetoes_are_retried() -> None:
    assert "not the veto unit's (cli)" in str(why_not_retried(
        attempt("timeout-after-sigint", origin="cli")))
    assert "ended allow" in str(why_not_retried(attempt(kind="allow")))


def wish(**changes: Any) -> LogindWish:
    base: dict[str, Any] = dict(
        lid_closed=False, docked=False, on_external_power=False, handle_lid_switch="suspend",
        handle_lid_switch_external_power="", handle_lid_switch_docked="ignore", idle_hint=False,
        idle_since_usec=0, idle_action="ignore", preparing_for_sleep=False)
    return LogindWish(**{**base, **changes})


def test_logind_still_wants_it_while_the_lid_is_closed_and_its_setting_says_so() -> None:
    assert still_wants(wish(lid_closed=True), "suspend", NOW) is not None
    assert still_wants(wish(lid_closed=False), "suspend", NOW) is None
    assert still_wants(wish(lid_closed=True), "hibernate", NOW) is None
    # Docked: HandleLidSwitchDocked applies; on external power, HandleLidSwitchExternalPower
    # when it is set, else HandleLidSwitch.
    assert still_wants(wish(lid_closed=True, docked=True), "suspend", NOW) is None
    assert still_wants(wish(lid_closed=True, on_external_power=True,
                            handle_lid_switch_external_power="ignore"), "suspend", NOW) is None
    assert still_wants(wish(lid_closed=True, on_external_power=True), "suspend", NOW) is not None


def test_logind_still_wants_it_while_nobody_used_the_machine_since_the_veto() -> None:
    before, after = int((NOW - 60) * 1e6), int((NOW + 5) * 1e6)
    assert still_wants(wish(idle_hint=True, idle_since_usec=before), "suspend", NOW) is not None
    assert still_wants(wish(idle_hint=True, idle_since_usec=after), "suspend", NOW) is None
    assert still_wants(wish(idle_hint=False, idle_since_usec=before), "suspend", NOW) is None
    # systemd 252 with no session at all (a headless node): idle, since no time it names.
    assert still_wants(wish(idle_hint=True, idle_since_usec=0), "suspend", NOW) is not None


def test_what_logind_says_when_it_no_longer_wants_the_sleep_is_what_it_says() -> None:
    assert no_longer(wish(), "suspend") == (
        "the lid is open, and the machine is in use (logind's IdleHint is off)")
    assert no_longer(wish(lid_closed=True, docked=True, idle_hint=True), "suspend") == (
        "on the closed lid logind does ignore now, and it was used after the veto (logind's "
        "IdleSinceHint)")


# --- the loop, with real holders and the fake logind -------------------------------------

pytestmark_bus = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")


def real_veto(config: Any) -> Attempt:
    """The veto unit's run, for real: the holder gets SIGINT and outlives its wait."""
    report = run(config, dry_run=False, action="suspend", origin="unit", idle_check=None,
                 log=Logger(io.StringIO(), {}), history=History.open)
    assert [r.code for r in report.verdict.reasons] == ["timeout-after-sigint"], report.verdict
    return report.attempt


class Loop:
    def __init__(self, bus: PrivateBus, config: Any) -> None:
        self.bus, self.config = bus, config
        self.asked: list[float] = []
        self.said: list[str] = []

    def request(self, action: str) -> SleepJob | Unavailable:
        self.asked.append(time.monotonic())
        return request_sleep(action, 30.0, self.bus.address)

    def __call__(self, vetoed: Attempt, bound_s: float) -> Retried:
        return retry(vetoed, "suspend", bound_s, look=dry_look(self.config, {}),
                     wish=lambda: logind_wish(address=self.bus.address), request=self.request,
                     latest=lambda since: None, say=self.said.append, rescan_s=1.0)


def lid(tmp_path: Path, state: str) -> dict[str, Any]:
    path = tmp_path / "lid"
    path.write_text(state)
    return {"lid_file": str(path), "handle_lid_switch": "suspend", "jobs": {}}


@pytestmark_bus
def test_it_asks_again_once_the_holder_has_left_while_the_lid_stays_closed(
        bus: PrivateBus, tmp_path: Path, make_config: Any, node: str, holders: Holders) -> None:
    config = make_config(drain={"timeout_s": 1})
    proc, pid = holders.start(node, delay=4.0)  # leaves 4 s after SIGINT: after its wait
    vetoed = real_veto(config)
    assert proc.poll() is None
    loop = Loop(bus, config)
    with fake_service(bus, lid(tmp_path, "closed")):
        result = loop(vetoed, 30.0)
    assert result == Retried(0, "retried: the suspend went ahead (try 1)"), loop.said
    assert proc.wait(timeout=1) == 0 and len(loop.asked) == 1
    assert any(f"pid {pid}" in line and "still running after SIGINT" in line
               for line in loop.said)
    assert holders.signals() == [f"{pid} SIGINT"]  # the guard's one SIGINT; the loop sent none


@pytestmark_bus
def test_it_stops_without_asking_when_the_lid_is_opened(
        bus: PrivateBus, tmp_path: Path, make_config: Any, node: str, holders: Holders) -> None:
    config = make_config(drain={"timeout_s": 1})
    proc, _ = holders.start(node, mode="slow")  # never leaves after SIGINT
    vetoed = real_veto(config)
    loop = Loop(bus, config)
    state = lid(tmp_path, "closed")
    opened = threading.Timer(1.5, Path(state["lid_file"]).write_text, ["open"])
    with fake_service(bus, state):
        begun = time.monotonic()
        opened.start()
        try:
            result = loop(vetoed, 30.0)
        finally:
            opened.cancel()
    assert result.status == 0 and result.line.startswith(
        "no retry: logind no longer wants to sleep"), result
    assert time.monotonic() - begun < 10 and loop.asked == []
    assert proc.poll() is None


@pytestmark_bus
def test_it_asks_nothing_while_another_user_holds_a_lock_on_sleep(
        bus: PrivateBus, tmp_path: Path, make_config: Any, node: str, holders: Holders) -> None:
    # logind's own lid action obeys the lock; asked as root, the sleep would pass it.
    config = make_config(drain={"timeout_s": 1})
    proc, _ = holders.start(node, delay=2.0)
    vetoed = real_veto(config)
    loop = Loop(bus, config)
    state = {**lid(tmp_path, "closed"), "inhibitors": [
        ["sleep:handle-lid-switch", "rsync", "backup running", "block", 1000, 4242],
        ["sleep", "suspendguard", "a job holds the accelerator", "block", 0, 1]]}
    with fake_service(bus, state):
        result = loop(vetoed, 30.0)
    assert result == Retried(0, "no retry: rsync (backup running), uid 1000 holds a lock on "
                                "sleep, which logind's own suspend obeys"), loop.said
    assert loop.asked == [] and proc.wait(timeout=10) == 0


@pytestmark_bus
def test_it_gives_up_after_its_bound(bus: PrivateBus, tmp_path: Path, make_config: Any,
                                     node: str, holders: Holders) -> None:
    config = make_config(drain={"timeout_s": 1})
    proc, pid = holders.start(node, mode="slow")
    vetoed = real_veto(config)
    loop = Loop(bus, config)
    with fake_service(bus, lid(tmp_path, "closed")):
        begun = time.monotonic()
        result = loop(vetoed, 2.0)
    assert result == Retried(1, f"gave up after 2 s: still running after SIGINT: pid {pid}")
    assert 2.0 <= time.monotonic() - begun < 8 and loop.asked == []
    assert proc.poll() is None


def test_a_certain_veto_asks_logind_nothing() -> None:
    def never(*_: Any) -> Any:
        raise AssertionError("asked")

    result = retry(attempt("sigint-ignored"), "suspend", 30.0, look=never, wish=never,
                   request=never, latest=never, say=never)
    assert result.status == 0 and "does not end by itself: sigint-ignored" in result.line


@pytestmark_bus
@pytest.mark.parametrize("mode,said", [
    ("slow", "no retry: suspendguard-retry-suspend.service could not be started"),
    ("deaf", "does not end by itself: sigint-ignored")])
def test_the_veto_unit_offers_a_retry_only_for_a_transient_veto(
        bus: PrivateBus, conf: Path, node: str, holders: Holders, mode: str, said: str) -> None:
    from suspendguard.cli import main
    holders.start(node, mode=mode)
    conf.write_text(conf.read_text().replace("timeout_s = 5", "timeout_s = 1")
                    + "[notify]\nretry = true\ndesktop = false\nwall = false\n")
    err = io.StringIO()
    # The fake systemd has no StartTransientUnit: the offer fails, and says so.
    with fake_service(bus, {"jobs": {}}):
        code = main(["pre-sleep", "suspend", "--config", str(conf)], out=io.StringIO(), err=err,
                    environ={"DBUS_SYSTEM_BUS_ADDRESS": bus.address}, stdin=io.StringIO())
    assert code == 1 and said in err.getvalue(), err.getvalue()


def looked(verdict: Verdict) -> Report:
    """A look's report of ``verdict``, with no holder."""
    return Report(Attempt(0, 0.0, 0.0, None, "watch", True, verdict, ""), Inventory(()), 0,
                  IdleSkipped("none", "no device"))


def test_it_asks_nothing_when_logind_stopped_wanting_the_sleep_before_the_first_look() -> None:
    """A device-busy veto clears at the first look: the lid was opened meanwhile (someone
    came back to the machine that did not sleep), so logind no longer wants it."""
    asked: list[str] = []

    def request(action: str) -> SleepJob | Unavailable:
        asked.append(action)
        return SleepJob(action, "suspend.target", "done", NOW)

    result = retry(attempt("device-busy"), "suspend", 30.0,
                   look=lambda: looked(Verdict("allow", ())),
                   wish=lambda: wish(lid_closed=False), request=request,
                   latest=lambda since: None, say=lambda line: None)
    assert asked == [] and result.status == 0, result
    assert result.line.startswith("no retry: logind no longer wants to sleep"), result


def test_one_answer_logind_missed_while_waiting_ends_nothing() -> None:
    """logind busy a moment (another sleep's PrepareForSleep fan-out) while the cause clears:
    the retry goes on, and asks once logind answers that it still wants the sleep."""
    busy = Verdict("veto", (Reason("device-busy", "npu 0 (npu-smi): AI Core 37% > 0%"),))
    looks = iter([busy, busy])
    answers = iter([Unavailable("logind did not answer within 2 s")])
    asked: list[str] = []

    def request(action: str) -> SleepJob | Unavailable:
        asked.append(action)
        return SleepJob(action, "suspend.target", "done", NOW)

    result = retry(attempt("device-busy"), "suspend", 30.0,
                   look=lambda: looked(next(looks, Verdict("allow", ()))),
                   wish=lambda: next(answers, wish(lid_closed=True)), request=request,
                   latest=lambda since: None, say=lambda line: None, rescan_s=0.05)
    assert result == Retried(0, "retried: the suspend went ahead (try 1)"), result
    assert asked == ["suspend"]


def test_a_sleep_someone_else_asked_for_since_the_veto_ends_the_retry() -> None:
    """A wake by a timer or Wake-on-LAN touches no session: logind's idle state still predates
    the veto, and asking again would put the machine back to sleep before its job ran."""
    asked: list[str] = []
    slept = Attempt(id=8, started=NOW + 60, finished=NOW + 61, action="suspend", origin="unit",
                    dry_run=False, verdict=Verdict("allow", ()), config_digest="")

    def request(action: str) -> SleepJob | Unavailable:
        asked.append(action)
        return SleepJob(action, "suspend.target", "done", NOW)

    result = retry(attempt("device-busy"), "suspend", 30.0,
                   look=lambda: looked(Verdict("allow", ())),
                   wish=lambda: wish(idle_hint=True, idle_since_usec=int((NOW - 600) * 1e6)),
                   request=request, latest=lambda since: slept if since <= slept.started else None,
                   say=lambda line: None)
    assert result == Retried(0, "no retry: attempt 8 let a suspend go ahead since the veto, "
                                "and the machine woke again"), result
    assert asked == []


def test_a_retry_unit_that_gave_up_does_not_block_the_next_retry(
        conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry that gives up exits 1 (or 3): its transient unit fails, and with systemd's
    default CollectMode=inactive a failed unit stays loaded until reset-failed, so every
    later StartTransientUnit of the same name is refused ("already loaded"). The unit is
    made to be unloaded when it failed too."""
    from suspendguard.commands import retry as command
    from suspendguard.commands.context import Context
    started: list[Any] = []
    monkeypatch.setattr(command, "unit_attempt", lambda *_: attempt("device-busy"))
    monkeypatch.setattr(command, "start_transient",
                        lambda name, spec, **_: started.append((name, spec)) or "active")
    conf.write_text(conf.read_text() + "[notify]\nretry = true\n")
    ctx = Context(str(conf), io.StringIO(), io.StringIO(), environ={})
    command.offer_retry(ctx, "suspend", NOW, Logger(io.StringIO(), {}))
    [(name, spec)] = started
    props = {key: value.value for key, value in spec.properties()}
    assert name == "suspendguard-retry-suspend.service"
    assert props.get("CollectMode") == "inactive-or-failed", props
    # Isolated, as every root entry point: not the cwd's modules nor PYTHON* variables.
    [(path, argv, _)] = props["ExecStart"]
    assert path == sys.executable and argv[:4] == [sys.executable, "-I", "-m", "suspendguard"]
    assert argv[4:8] == ["retry", "suspend", "--attempt", "7"], argv


def _cleared(request: Any, latest: Any, wishes: Any = None) -> Retried:
    """A device-busy veto whose cause has cleared at the first look, the lid still closed."""
    return retry(attempt("device-busy"), "suspend", 30.0,
                 look=lambda: looked(Verdict("allow", ())),
                 wish=wishes or (lambda: wish(lid_closed=True)), request=request,
                 latest=latest, say=lambda line: None)


@pytest.mark.parametrize("state", ["done", "interrupted"])
def test_a_sleep_asked_again_and_refused_as_unknown_is_given_up_naming_why(state: str) -> None:
    """The guard recorded the refusal: an unknown is never retried, and the line says what
    the guard could not tell rather than that it recorded nothing."""
    asked: list[str] = []
    unknown = Attempt(id=8, started=NOW + 60, finished=NOW + 61, action="suspend",
                      origin="unit", dry_run=False, config_digest="", state=state,  # type: ignore[arg-type]
                      verdict=Verdict("unknown", (
                          Reason("uninspected", "pid 77 could not be read"),
                          Reason("device-busy", "npu 0 is still busy"))))

    def request(action: str) -> SleepJob | Unavailable:
        asked.append(action)
        return SleepJob(action, "suspend.target", "dependency", NOW + 61)

    result = _cleared(request, lambda since: unknown)
    assert result == Retried(1, f"gave up: attempt 8 refused the suspend ({unknown.result}): "
                                "pid 77 could not be read"), result
    assert asked == ["suspend"]


def test_a_sleep_logind_keeps_in_progress_is_given_up_not_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """logind answered all along: the retry gave up (1), it did not fail to ask (3)."""
    from suspendguard.guard import retry as engine
    monkeypatch.setattr(engine, "SETTLE_S", 0.0)

    def never(*_: Any) -> Any:
        raise AssertionError("asked")

    result = _cleared(never, never, lambda: wish(lid_closed=True, preparing_for_sleep=True))
    assert result == Retried(1, "gave up: logind kept a sleep in progress for 0 s"), result


@pytest.mark.parametrize("blip", [
    [wish(lid_closed=False)],  # the lid opened and closed again within a second
    [Unavailable("logind did not answer within 2 s")] * 3,  # logind busy three asks in a row
], ids=["lid flapped", "logind missed three answers"])
def test_what_logind_said_while_waiting_and_took_back_ends_in_giving_up_at_the_bound(
        blip: list[LogindWish | Unavailable]) -> None:
    """The wait's once-a-second ask saw the sleep not wanted (or logind not answering); the
    look after it asked again and logind wanted it after all. The device still busy at the
    bound is a retry that gave up (exit 1), not one with nothing left to retry (0) nor one
    logind could not be asked for (3)."""
    busy = Verdict("veto", (Reason("device-busy", "npu 0 (npu-smi): AI Core 37% > 0%"),))
    closed = wish(lid_closed=True)
    answers = iter([closed, *blip])
    said: list[str] = []

    def never(*_: Any) -> Any:
        raise AssertionError("asked")

    bound = 1.5 + len(blip)  # the blip's asks come about once a second while waiting
    result = retry(attempt("device-busy"), "suspend", bound, look=lambda: looked(busy),
                   wish=lambda: next(answers, closed), request=never, latest=lambda since: None,
                   say=said.append)
    assert next(answers, None) is None, "the blip was never asked"
    assert result.status == 1 and result.line.startswith("gave up: still there after "), result
    assert result.line.endswith(" s: npu 0 (npu-smi): AI Core 37% > 0%"), result

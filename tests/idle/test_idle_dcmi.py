"""DCMI through ctypes against a compiled fake libdcmi.so with the real C signatures."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import FAKES
from helpers.clib import build_shared
from helpers.wait import wait_for

from suspendguard.config import IdleConfig, defaults
from suspendguard.idle.base import QueryFailed
from suspendguard.idle.dcmi import DEFAULT_LIBRARIES, DcmiBackend
from suspendguard.idle.sampler import check_idle
from suspendguard.system.deadline import UNBOUNDED

SOURCE = FAKES / "idle" / "fake_dcmi.c"
MB = 1024 * 1024


@pytest.fixture(scope="module")
def libdcmi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shared(SOURCE, tmp_path_factory.mktemp("dcmi"), "libdcmi.so")


@pytest.fixture
def hardware(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake's state file; tests write the lines the C comment describes."""
    state = tmp_path / "dcmi.state"
    state.write_text("")
    monkeypatch.setenv("FAKE_DCMI_STATE", str(state))
    monkeypatch.setenv("FAKE_DCMI_LOG", str(tmp_path / "dcmi.log"))
    return state


def config(lib: Path | str, **kw: object) -> IdleConfig:
    base = replace(defaults().idle, dcmi_library=str(lib))
    return replace(base, **kw)  # type: ignore[arg-type]


def test_utilization_and_host_processes(libdcmi: Path, hardware: Path) -> None:
    hardware.write_text(
        "cards 0 32896\n"
        "devices 0 2\n"
        "util 0 0 37\n"
        "util 0 1 0\n"
        f"procs 0 0 4242:{512 * MB} 4243:{MB}\n"
        "util 32896 0 0\n"
    )
    backend = DcmiBackend(config(libdcmi))
    assert backend.probe() == (True, str(libdcmi))
    readings = backend.query(5.0)
    assert [(r.id, r.state, r.readings["aicore_pct"]) for r in readings] == [
        ("npu 0 chip 0", "busy", 37.0), ("npu 0 chip 1", "idle", 0.0), ("npu 32896", "idle", 0.0)]
    assert [(p.pid, p.memory_mb, p.device, p.source) for p in readings[0].processes] == [
        (4242, 512.0, "npu 0 chip 0", "dcmi"), (4243, 1.0, "npu 0 chip 0", "dcmi")]
    # init once per backend, whatever the number of samples
    backend.query(5.0)
    log = (hardware.parent / "dcmi.log").read_text().splitlines()
    assert log.count("dcmi_init") == 1


def test_not_supported_is_unknown_never_busy(libdcmi: Path, hardware: Path) -> None:
    hardware.write_text("cards 0\nutil_ret 0 0 -8255\nprocs_ret 0 0 -8255\n")
    [reading] = DcmiBackend(config(libdcmi)).query(5.0)
    assert reading.state == "unknown"
    assert reading.readings == {"aicore_pct": None}
    assert "AI Core rate not supported (-8255)" in reading.reason
    assert "process list not supported (-8255)" in reading.reason


def test_process_list_unsupported_keeps_the_utilization(libdcmi: Path, hardware: Path) -> None:
    # the Atlas 200I A2 case: rate readable, resource info not
    hardware.write_text("cards 0\nutil 0 0 0\nprocs_ret 0 0 -8255\n")
    [reading] = DcmiBackend(config(libdcmi)).query(5.0)
    assert (reading.state, reading.processes) == ("idle", ())


def test_at_most_32_processes(libdcmi: Path, hardware: Path) -> None:
    many = " ".join(f"{1000 + i}:{MB}" for i in range(40))
    hardware.write_text(f"cards 0\nprocs 0 0 {many}\n")
    [reading] = DcmiBackend(config(libdcmi)).query(5.0)
    assert len(reading.processes) == 32


@pytest.mark.parametrize(("state", "message"), [
    ("init -8005\n", "dcmi_init returned -8005"),
    ("cards_ret -8001\n", "dcmi_get_card_list returned -8001"),
])
def test_library_errors_fail_the_query(libdcmi: Path, hardware: Path, state: str,
                                       message: str) -> None:
    hardware.write_text(state)
    with pytest.raises(QueryFailed, match=message):
        DcmiBackend(config(libdcmi)).query(5.0)


def test_card_with_unreadable_device_count(libdcmi: Path, hardware: Path) -> None:
    hardware.write_text("cards 3\ndevices_ret 3 -8255\n")
    [reading] = DcmiBackend(config(libdcmi)).query(5.0)
    assert (reading.id, reading.state) == ("npu 3", "unknown")


def test_hung_call_is_abandoned_and_not_repeated(libdcmi: Path, hardware: Path) -> None:
    hardware.write_text("cards 0\nhang dcmi_get_device_utilization_rate 1\n")
    backend = DcmiBackend(config(libdcmi))
    with pytest.raises(QueryFailed, match=r"no answer within 0\.3 s"):
        backend.query(0.3)
    with pytest.raises(QueryFailed, match="not asked again"):
        backend.query(5.0)
    answers_once_returned(libdcmi, hardware)


def answers_once_returned(lib: Path, hardware: Path) -> None:
    """Wait for the stuck call to return: the library is asked again then, and answers."""
    hardware.write_text("cards 0\nutil 0 0 0\n")
    cfg = config(lib, backends=("dcmi",))
    wait_for(lambda: check_idle(cfg, ["ascend"], UNBOUNDED).state == "idle", timeout=10.0,
             interval=0.2, message="the library was never asked again")


def test_a_call_still_stuck_is_not_entered_again_by_a_later_check(libdcmi: Path,
                                                                  hardware: Path) -> None:
    """The look before the drain, the check after it and every watch look each make their own
    backends: none may call into a library whose abandoned call has not returned."""
    hardware.write_text("cards 0\nhang dcmi_get_device_utilization_rate 3\n")
    log = hardware.parent / "dcmi.log"
    cfg = config(libdcmi, backends=("dcmi",), command_timeout_s=0.3, on_unknown="veto")
    first = check_idle(cfg, ["ascend"], UNBOUNDED)
    assert first.state == "unknown" and "no answer within 0.3 s" in first.veto_reasons[0]
    def entered() -> list[int]:  # what only a new call into the library logs
        calls = log.read_text().splitlines()
        return [calls.count("dcmi_init"), calls.count("dcmi_get_card_list")]

    assert entered() == [1, 1]
    later = check_idle(cfg, ["ascend"], UNBOUNDED)
    assert entered() == [1, 1]  # not entered again
    assert later.state == "unknown"
    assert "not asked again while that call is stuck" in later.veto_reasons[0]
    answers_once_returned(libdcmi, hardware)


def test_missing_or_broken_library(tmp_path: Path) -> None:
    ok, why = DcmiBackend(config(tmp_path / "libdcmi.so")).probe()
    assert not ok and "[idle] dcmi_library" in why
    broken = tmp_path / "libbroken.so"
    broken.write_text("not an ELF file")
    ok, why = DcmiBackend(config(broken)).probe()
    assert not ok and "cannot load" in why
    if not any(Path(p).is_file() for p in DEFAULT_LIBRARIES):
        ok, why = DcmiBackend(config("")).probe()
        assert not ok and "libdcmi.so not found" in why

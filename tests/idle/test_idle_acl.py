"""pyACL: the probe runs as a real child, with a fake ``acl`` put on its path
by a fake set_env.sh, exactly as CANN's own set_env.sh would."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKES

from suspendguard.config import IdleConfig, defaults
from suspendguard.idle.acl import DEFAULT_ENV_SCRIPTS, AclBackend
from suspendguard.idle.base import QueryFailed
from suspendguard.system.deadline import UNBOUNDED

SITE = FAKES / "idle" / "acl_site"
SET_ENV = SITE / "set_env.sh"


def config(**kw: object) -> IdleConfig:
    base = replace(defaults().idle, ascend_env=str(SET_ENV))
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.fixture
def acl_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Write the fake acl's script; fails the test if set_device was ever called."""
    state = tmp_path / "acl.json"
    marker = tmp_path / "set_device-called"
    log = tmp_path / "acl.log"
    monkeypatch.setenv("FAKE_ACL_STATE", str(state))
    monkeypatch.setenv("FAKE_ACL_SET_DEVICE_MARKER", str(marker))
    monkeypatch.setenv("FAKE_ACL_LOG", str(log))

    class Script:
        def write(self, **values: Any) -> None:
            state.write_text(json.dumps(values))

        def calls(self) -> list[str]:
            return log.read_text().splitlines() if log.exists() else []

    yield Script()
    assert not marker.exists(), "the probe called acl.rt.set_device: it must never hold the device"
    assert not any("set_device" in c for c in Script().calls())


def idle_device(**over: int) -> dict[str, int]:
    d = {"cube_utilization": 0, "vector_utilization": 0, "aicpu_utilization": 3,
         "memory_utilization": 12}
    d.update(over)
    return d


def test_reads_each_device_and_finalizes(acl_state: Any) -> None:
    acl_state.write(devices=[idle_device(), idle_device(cube_utilization=37)])
    readings = AclBackend(config()).query(20.0)
    assert [(r.id, r.state) for r in readings] == [("device 0", "idle"), ("device 1", "busy")]
    assert readings[1].readings == {"cube_pct": 37.0, "vector_pct": 0.0, "aicpu_pct": 3.0,
                                    "memory_pct": 12.0}
    assert acl_state.calls() == ["init", "rt.get_device_count",
                                 "rt.get_device_utilization_rate 0",
                                 "rt.get_device_utilization_rate 1", "finalize"]


def test_every_device_is_read_whatever_the_guard_s_own_visible_devices(
        acl_state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A shell where a job's view was set: the runtime would show the probe that one alone.
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0")
    acl_state.write(devices=[idle_device(), idle_device(cube_utilization=37)])
    readings = AclBackend(config()).query(20.0)
    assert [(r.id, r.state) for r in readings] == [("device 0", "idle"), ("device 1", "busy")]


def test_minus_one_is_not_supported_not_busy(acl_state: Any) -> None:
    acl_state.write(devices=[idle_device(cube_utilization=-1, vector_utilization=-1,
                                         aicpu_utilization=-1, memory_utilization=-1)])
    [reading] = AclBackend(config()).query(20.0)
    assert reading.state == "unknown"
    assert set(reading.readings.values()) == {None}
    assert "not supported" in reading.reason


def test_vector_alone_counts_and_memory_does_not(acl_state: Any) -> None:
    acl_state.write(devices=[idle_device(vector_utilization=-1, memory_utilization=95),
                             idle_device(vector_utilization=5)])
    a, b = AclBackend(config()).query(20.0)
    assert (a.state, b.state) == ("idle", "busy")


def test_failing_device_call_is_unknown(acl_state: Any) -> None:
    acl_state.write(devices=[idle_device(ret=507899)])
    [reading] = AclBackend(config()).query(20.0)
    assert reading.state == "unknown" and "507899" in reading.reason


def test_init_failure_is_a_failed_query(acl_state: Any) -> None:
    acl_state.write(init=100000, devices=[])
    with pytest.raises(QueryFailed, match=r"acl.init\(\) returned 100000"):
        AclBackend(config()).query(20.0)


def test_chatter_on_stdout_is_tolerated(acl_state: Any) -> None:
    acl_state.write(mode="noise", devices=[idle_device()])
    [reading] = AclBackend(config()).query(20.0)
    assert reading.state == "idle"


def test_hung_child_is_killed_at_the_timeout(acl_state: Any) -> None:
    acl_state.write(mode="hang", devices=[idle_device()])
    with pytest.raises(QueryFailed, match="no answer within the timeout"):
        AclBackend(config()).query(1.5)


def test_crashed_child_is_unknown_with_the_signal(acl_state: Any) -> None:
    acl_state.write(mode="crash", devices=[idle_device()])
    with pytest.raises(QueryFailed, match="killed by SIGSEGV"):
        AclBackend(config()).query(20.0)


def test_set_env_without_acl(tmp_path: Path, acl_state: Any) -> None:
    empty_env = tmp_path / "set_env.sh"
    empty_env.write_text("export SOMETHING=1\n")
    with pytest.raises(QueryFailed, match="cannot import acl"):
        AclBackend(config(ascend_env=str(empty_env))).query(20.0)


def test_probe_needs_a_set_env(tmp_path: Path) -> None:
    ok, why = AclBackend(config(ascend_env=str(tmp_path / "nope.sh"))).probe()
    assert not ok and "[idle] ascend_env" in why
    assert AclBackend(config()).probe() == (True, str(SET_ENV))
    if not any(os.path.isfile(p) for p in DEFAULT_ENV_SCRIPTS):
        ok, why = AclBackend(config(ascend_env="")).probe()
        assert not ok and "/usr/local/Ascend/ascend-toolkit/set_env.sh" in why


@pytest.mark.skipif(os.geteuid() != 0, reason="the trust rule applies to root")
def test_untrusted_cann_default_is_unknown_and_vetoes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from suspendguard.idle import acl as acl_module
    from suspendguard.idle.sampler import check_idle

    # A set_env.sh at a default place that someone other than root can change.
    shared = tmp_path / "Ascend"
    shared.mkdir()
    shared.chmod(0o777)
    script = shared / "set_env.sh"
    script.write_text("export PYTHONPATH=/tmp/elsewhere\n")
    monkeypatch.setattr(acl_module, "DEFAULT_ENV_SCRIPTS", (str(script),))
    cfg = replace(defaults().idle, ascend_env="", samples=1, settle_s=0.1)
    ok, why = acl_module.AclBackend(cfg).probe()
    assert not ok and why.endswith(": not used") and str(shared) in why
    report = check_idle(cfg, ["ascend"], UNBOUNDED, backends=[acl_module.AclBackend(cfg)])
    assert report.state == "unknown"
    [veto] = report.veto_reasons
    assert veto.startswith("ascend: no idle backend could answer (acl: ")
    assert veto.endswith("vetoed by [idle] on_unknown = veto")

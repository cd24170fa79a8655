"""The restart policies set aside for a drain, as restore and the next guard run put them back.

Against tests/fakes/engine (the Docker Engine API on a unix socket, real
processes in cgroups), handed to the guard as DOCKER_HOST, as in
test_containers.py: a policy an operator set while the container was down,
a record of the policies' file that is not a policy, and a container
removed before its policy went back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.engine.fake_engine import FakeEngine, cgroup_root
from helpers.holders import HOLDER, Holders
from helpers.isolation import ROOT
from helpers.runners import cli, guard
from helpers.wait import wait_for

from suspendguard.supervise.containers import POLICIES_FILE
from suspendguard.supervise.managers import ManagersAndEngines

pytestmark = pytest.mark.skipif(not ROOT or cgroup_root() is None,
                                reason="the fake engine puts its containers in cgroups: root and "
                                       "a writable cgroup v2 tree")

BAD = [["always"], "always", ["on-failure", None], ["always", "3"], {"Name": "always"}]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[FakeEngine]:
    with FakeEngine(str(tmp_path / "docker.sock")) as e:
        yield e


def env(engine: FakeEngine) -> dict[str, str]:
    return {"DOCKER_HOST": f"unix://{engine.socket_path}"}


def drained(engine: FakeEngine, node: str, holders: Holders, tmp_path: Path,
            make_config: Any) -> Any:
    """A container (restart always) whose job the guard drained: down, its policy set aside."""
    c = engine.create([sys.executable, HOLDER, "--node", node, "--mode", "graceful", "--delay",
                       "0", "--marker", holders.marker], restart="always")
    supervisors = ManagersAndEngines(environ=env(engine), state_dir=str(tmp_path / "state"))
    assert guard(make_config(), supervisors=supervisors).verdict.kind == "allow"
    wait_for(lambda: not c.running, 5)
    assert c.restart == ""  # set aside: "no"
    return c


def restored(engine: FakeEngine, conf: Path) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli("--config", str(conf), "restore", "--json",
                         environ=env(engine))
    assert "Traceback" not in err, err
    return code, json.loads(out), err


def test_a_policy_an_operator_set_while_the_container_was_down_is_kept(
        engine: FakeEngine, conf: Path, node: str, holders: Holders, tmp_path: Path,
        make_config: Any) -> None:
    c = drained(engine, node, holders, tmp_path, make_config)
    # docker update --restart=on-failure:3 while it is drained: the operator's, not the guard's.
    status, _ = engine.handle("POST", f"/v1.43/containers/{c.id}/update", json.dumps(
        {"RestartPolicy": {"Name": "on-failure", "MaximumRetryCount": 3}}).encode())
    assert status == 200
    code, doc, err = restored(engine, conf)
    [done] = doc["restored"]
    assert code == 0 and done["result"] == "started", (done, err)
    assert "its restart policy was set to on-failure:3 while it was drained: kept" in done["why"]
    assert (c.restart, c.restart_max) == ("on-failure", 3)
    assert engine.wait_running(c)


@pytest.mark.parametrize("record", BAD, ids=json.dumps)
def test_a_record_that_is_no_policy_is_dropped_with_a_line_at_restore(
        engine: FakeEngine, conf: Path, node: str, holders: Holders, tmp_path: Path,
        make_config: Any, record: Any) -> None:
    c = drained(engine, node, holders, tmp_path, make_config)
    policies = tmp_path / "state" / POLICIES_FILE
    key = f"docker:{c.id}"
    policies.write_text(json.dumps({key: record}))
    code, doc, err = restored(engine, conf)
    [done] = doc["restored"]
    assert code == 0 and done["result"] == "started", (done, err)
    assert f"{policies}: the record of {key}, {json.dumps(record)}, is not a restart policy" \
        in done["why"], done["why"]
    assert "dropped" in done["why"] and f"docker update --restart=POLICY {c.id[:12]}" \
        in done["why"]
    assert engine.wait_running(c) and not policies.exists()


@pytest.mark.parametrize("record", BAD, ids=json.dumps)
def test_a_record_that_is_no_policy_left_by_a_run_is_dropped_with_a_line(
        engine: FakeEngine, conf: Path, node: str, tmp_path: Path, make_config: Any,
        record: Any) -> None:
    # What a run left for the next one to put back: every guard run and every restore reads it.
    c = engine.create(["/bin/sh", "-c", "echo \"ready $$\"; exec sleep 60"], restart="")
    policies = tmp_path / "state" / POLICIES_FILE
    policies.parent.mkdir(parents=True, exist_ok=True)
    key = f"docker:{c.id}"
    line = f"{policies}: the record of {key}, {json.dumps(record)}, is not a restart policy"
    policies.write_text(json.dumps({key: record}))
    supervisors = ManagersAndEngines(environ=env(engine), state_dir=str(tmp_path / "state"))
    report = guard(make_config(), supervisors=supervisors)
    assert [w for w in report.verdict.warnings if line in w], report.verdict.warnings
    assert not policies.exists()

    policies.write_text(json.dumps({key: record}))
    code, out, err = cli("--config", str(conf), "restore", environ=env(engine))
    assert (code, out) == (0, "nothing to restore\n") and "Traceback" not in err, err
    assert err.count(line) == 1, err
    assert not policies.exists() and c.restart == ""


def test_a_policy_of_a_container_removed_since_is_said_dropped_not_put_back(
        engine: FakeEngine, conf: Path, node: str, tmp_path: Path) -> None:
    policies = tmp_path / "state" / POLICIES_FILE
    policies.parent.mkdir(parents=True)
    gone = "b" * 64  # the engine answers 404: no such container
    policies.write_text(json.dumps({f"docker:{gone}": ["always", 0]}))
    code, out, err = cli("--config", str(conf), "restore", environ=env(engine))
    assert (code, out) == (0, "nothing to restore\n"), err
    assert (f"docker container {gone[:12]} no longer exists: the restart policy always a guard "
            "run had set aside for it was dropped") in err, err
    assert "put back the restart policy" not in err
    assert not policies.exists()

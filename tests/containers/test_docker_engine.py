"""Containers on a real Docker Engine: every shape of PID 1, every restart policy.

A private dockerd in the suite's PID namespace (helpers/docker.py). Each
container runs tests/helpers/holder.py on the test node (as /dev/davinci0):
as PID 1 itself, under ``sh -c`` (a shell entrypoint, which as PID 1 of its
namespace drops a SIGINT it has no handler for), and under ``--init``
(tini, which forwards to its direct child, the shell). The job exits 3
after a graceful SIGINT, so that ``on-failure`` would start it again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.docker import DockerEngine
from helpers.holders import HOLDER, Holders
from helpers.runners import cli, guard
from helpers.wait import wait_for

from suspendguard.supervise.managers import ManagersAndEngines

pytestmark = [pytest.mark.docker, pytest.mark.root]

PYTHON = "/usr/bin/python3"
SHAPES = ("job", "shell", "init")
POLICIES = ("always", "unless-stopped", "on-failure:5")
# Longer than Docker's first restart delay (100 ms) and the guard's wait.
SLEEP_S = 1.0
GRACEFUL_EXIT = 3


def argv(shape: str, marker: str) -> list[str]:
    job = [PYTHON, HOLDER, "--node", "/dev/davinci0", "--mode", "graceful", "--delay", "0.2",
           "--marker", marker, "--exit", str(GRACEFUL_EXIT)]
    if shape == "job":
        return job
    # "; exit $?" keeps the shell there as PID 1 (dash execs a lone last command).
    return ["/bin/sh", "-c", " ".join(job) + "; exit $?"]


def policy_of(spec: str) -> tuple[str, int]:
    name, _, count = spec.partition(":")
    return name, int(count or 0)


@pytest.fixture
def matrix(docker_engine: DockerEngine, node: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The nine containers, shape x policy, running and holding the node; removed after."""
    marks = tmp_path / "marks"
    marks.mkdir()
    made: dict[str, Any] = {}
    for shape in SHAPES:
        for spec in POLICIES:
            name = f"sg-{tmp_path.name[-20:]}-{shape}-{spec.split(':')[0]}".lower()
            marker = str(marks / f"{shape}-{spec.split(':')[0]}.log")
            docker_engine.run(name, argv(shape, marker), node=node, restart=spec,
                              init=shape == "init", writable=[str(marks)])
            made[name] = {"shape": shape, "policy": policy_of(spec), "marker": marker}
    deadline = time.monotonic() + 30
    for name in made:
        wait_ready(docker_engine, name, deadline - time.monotonic())
    yield made
    docker_engine.docker("rm", "-f", *made, check=False)


def wait_ready(engine: DockerEngine, name: str, timeout: float = 30.0) -> None:
    """The job ``name`` printed "ready" (it holds the node) within ``timeout``."""
    wait_for(lambda: "ready" in engine.docker("logs", name).stdout, timeout, interval=0.1,
             message=lambda: engine.docker("logs", name).stderr)


def config_file(tmp_path: Path, node: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n'
                    '[idle]\nbackends = []\n[drain]\ntimeout_s = 5\n')
    return str(path)


def sigints(marker: str) -> int:
    try:
        return sum(1 for line in Path(marker).read_text().splitlines() if line.endswith(" SIGINT"))
    except FileNotFoundError:
        return 0


def assert_drained_and_down(engine: DockerEngine, matrix: dict[str, Any]) -> None:
    for name, c in matrix.items():
        seen = engine.inspect(name)
        what = f"{name}: {json.dumps(seen['State'])}"
        assert sigints(c["marker"]) == 1, what  # the job itself got the drain signal, once
        assert not seen["State"]["Running"], what
        assert seen["State"]["ExitCode"] == GRACEFUL_EXIT, what  # graceful, not killed
        assert seen["RestartCount"] == 0, what


def assert_back(engine: DockerEngine, matrix: dict[str, Any]) -> None:
    for name, c in matrix.items():
        assert engine.wait_running(name), name
        assert engine.policy(name) == c["policy"], name  # as it was, `docker inspect` says


def test_every_shape_and_policy_is_drained_stays_down_and_runs_after_resume(
        docker_engine: DockerEngine, matrix: dict[str, Any], node: str, tmp_path: Path,
        make_config: Any) -> None:
    env = {"DOCKER_HOST": docker_engine.host}
    report = guard(make_config(), supervisors=ManagersAndEngines(environ=env,
                                                          state_dir=str(tmp_path / "state")))
    assert report.verdict.kind == "allow", report.verdict
    assert len(report.holders) == len(matrix)
    assert {h.owner.kind for h in report.holders} == {"docker"}
    assert {h.outcome.kind for h in report.holders} == {"exited"}
    time.sleep(SLEEP_S)  # the "sleep": no restart policy brings any back
    assert_drained_and_down(docker_engine, matrix)
    for name in matrix:
        assert docker_engine.policy(name) == ("no", 0), name

    code, out, err = cli("--config", config_file(tmp_path, node), "restore", "--json",
                         environ=env)
    assert code == 0, err
    assert [r["result"] for r in json.loads(out)["restored"]] == ["started"] * len(matrix), out
    assert_back(docker_engine, matrix)


def test_after_a_veto_every_container_runs_again_with_its_policy(
        docker_engine: DockerEngine, matrix: dict[str, Any], holders: Holders, node: str,
        tmp_path: Path, make_config: Any) -> None:
    _, slow = holders.start(node, mode="slow")  # exits too late: the veto
    env = {"DOCKER_HOST": docker_engine.host}
    report = guard(make_config(drain={"timeout_s": 2}),
                   supervisors=ManagersAndEngines(environ=env, state_dir=str(tmp_path / "state")))
    assert report.verdict.kind == "veto", report.verdict
    assert any(f"pid {slow}" in r for r in report.verdict.texts), report.verdict.texts
    for name, c in matrix.items():
        assert sigints(c["marker"]) == 1, name
    assert_back(docker_engine, matrix)
    for name in matrix:
        assert docker_engine.inspect(name)["RestartCount"] == 0, name  # the guard started it


def test_a_shell_as_pid_1_drops_the_signal_docker_stop_sends(
        docker_engine: DockerEngine, node: str, tmp_path: Path) -> None:
    # Why the guard signals the job itself: what `docker stop --signal SIGINT`
    # reaches under a shell entrypoint (the test above can fail without this).
    marks = tmp_path / "marks"
    marks.mkdir()
    marker = str(marks / "shell.log")
    name = f"sg-{tmp_path.name[-20:]}-stop".lower()
    docker_engine.run(name, argv("shell", marker), node=node, restart="always",
                      writable=[str(marks)])
    try:
        wait_ready(docker_engine, name)
        docker_engine.docker("kill", "--signal=SIGINT", name)
        time.sleep(SLEEP_S)
        assert sigints(marker) == 0 and docker_engine.running(name)
    finally:
        docker_engine.docker("rm", "-f", name, check=False)

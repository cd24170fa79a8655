"""``suspendguard status`` by a user who may not read the config (root's, mode 0600): the unit,
which runs as root, reads it, so nothing is refused; this user cannot tell what it will do."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import REPO
from helpers.runners import staged
from helpers.users import nobody_prefix, python_for_nobody
from prometheus_client.parser import text_string_to_metric_families

from suspendguard.cli import main
from suspendguard.model import Unavailable
from suspendguard.status.model import ONLY_ROOT, ConfigStatus
from suspendguard.store.history import History

UNGUARDED = "suspends are not guarded (the veto unit is not enabled: suspendguard install)"
# What status as user nobody gathers from a staged installation enabled for every sleep.
COLLECT = """
import json, sys
from suspendguard.status.collect import collect
from suspendguard.status.prometheus import exposition
s = collect(sys.argv[1], {"DBUS_SYSTEM_BUS_ADDRESS": sys.argv[2]}, root=sys.argv[3])
print(json.dumps({"enabled": list(s.installation.enabled), "next": s.next_suspend(),
                  "refused": s.refused_now(), "metrics": exposition(s)}))
"""


def refused_metric(text: str) -> float:
    [value] = [s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == "suspendguard_suspend_refused"]
    return value


@pytest.fixture
def root_only(node: str) -> Iterator[tuple[Path, Path]]:
    """(a folder user nobody can enter, a valid config in it only root may read)."""
    folder = Path(tempfile.mkdtemp(prefix="sg-status-denied-"))
    try:
        folder.chmod(0o755)
        conf = folder / "config.toml"
        conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                        f'[state]\ndir = "{folder / "state"}"\n[idle]\nbackends = []\n')
        conf.chmod(0o600)
        yield folder, conf
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_nobody() -> tuple[list[str], dict[str, str]]:
    """This checkout's interpreter as user nobody, and its environment."""
    prefix = nobody_prefix()
    if prefix is None:
        pytest.skip("needs root and setpriv or runuser to run as nobody")
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "PYTHONPATH": os.pathsep.join([str(REPO), *paths]), "HOME": "/nonexistent"}
    python = python_for_nobody(prefix, env)
    if python is None:
        pytest.skip("no python interpreter that user nobody can run imports suspendguard")
    return [*prefix, python], env


def test_a_config_only_root_may_read_is_unknown_to_a_user_not_refused(
        root_only: tuple[Path, Path]) -> None:
    folder, conf = root_only
    python, env = as_nobody()
    env["DBUS_SYSTEM_BUS_ADDRESS"] = f"unix:path={folder / 'no-bus'}"

    def status(*argv: str) -> str:
        done = subprocess.run([*python, "-m", "suspendguard", "status", "--config", str(conf),
                               *argv], env=env, capture_output=True, text=True, cwd="/",
                              timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return done.stdout

    data = json.loads(status("--json"))
    assert data["euid"] != 0
    lead = f"{UNGUARDED}; what the guard would say is unknown to this user: {ONLY_ROOT}"
    assert data["verdict"]["next_suspend"] == lead
    assert data["verdict"]["verdict"] == "unknown"
    assert [(r["code"], r["text"]) for r in data["verdict"]["reason_details"]] == [
        ("uninspected", ONLY_ROOT)]
    assert data["config"]["error"] == f"{conf}: permission denied reading the configuration"
    text = status().splitlines()
    assert text[0] == lead and "refused" not in text[0]
    assert f"  config: {conf}: not readable by this user: {ONLY_ROOT} (status uses the built-in " \
           "defaults)" in text

    # With the veto unit enabled for suspend, as the host's would be: still nothing refused.
    stage = folder / "stage"
    assert main(["install", "--root", str(stage)], out=io.StringIO(), err=io.StringIO(),
                environ={}) == 0
    done = subprocess.run([*python, "-c", COLLECT, str(conf), env["DBUS_SYSTEM_BUS_ADDRESS"],
                           str(stage)], env=env, capture_output=True, text=True, cwd="/",
                          timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert "suspend" in seen["enabled"]
    assert seen["next"] == f"the next suspend: unknown to this user: {ONLY_ROOT}"
    assert seen["refused"] is None
    assert refused_metric(seen["metrics"]) == 0


def test_root_denied_the_config_is_still_a_refusal(conf: Path, tmp_path: Path,
                                                   no_bus: str) -> None:
    # Root is denied only where the unit is too (a home on NFS that squashes root): no
    # such mount here, so the denial is put in the report root's own run made.
    from suspendguard.status.collect import collect

    stage = staged(tmp_path)
    s = collect(str(conf), {"DBUS_SYSTEM_BUS_ADDRESS": no_bus}, root=str(stage))
    assert s.root and s.next_suspend() == "the next suspend would go ahead now"
    denied = Unavailable(f"{conf}: permission denied reading the configuration")
    s = replace(s, config=ConfigStatus(str(conf), True, denied))
    refusal = "the config is invalid: permission denied reading the configuration"
    assert s.refused_now() == refusal
    assert s.next_suspend() == f"every suspend will be refused: {refusal}"
    assert s.config.describe(root=True).startswith("invalid: permission denied")


def test_a_history_in_a_folder_this_user_may_not_enter_leaves_its_counters_out(
        root_only: tuple[Path, Path]) -> None:
    """Root's state folder (0700) hides a history that is there: counters written as 0 would
    read as a reset, and the next scrape's whole history as new attempts."""
    folder, conf = root_only
    conf.chmod(0o644)
    History.open(str(folder / "state")).close()  # the folder made 0700, as the guard makes it
    python, env = as_nobody()
    env["DBUS_SYSTEM_BUS_ADDRESS"] = f"unix:path={folder / 'no-bus'}"
    done = subprocess.run([*python, "-m", "suspendguard", "status", "--prometheus", "--config",
                           str(conf)], env=env, capture_output=True, text=True, cwd="/",
                          timeout=120)
    assert done.returncode == 0, done.stderr
    names = {s.name: s for family in text_string_to_metric_families(done.stdout)
             for s in family.samples if s.labels.get("part", "history") == "history"}
    assert names["suspendguard_status_part_available"].value == 0
    assert not any(name.startswith(("suspendguard_attempts", "suspendguard_findings"))
                   for name in names)

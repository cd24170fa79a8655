"""Asking a node's guard: the remote's argv, the answer read off stdout, and every way there is none.

The remote and the guard are real child processes (``env`` standing in for
ssh: it runs the rest of its command line, as ssh does on the node).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from suspendguard.config.cluster import SlurmConfig
from suspendguard.config.load import defaults
from suspendguard.slurm import remote
from suspendguard.verdict import Reason

ECHO = ("import json, os, sys; print('a banner'); print(json.dumps({'verdict': 'veto', "
        "'argv': sys.argv[1:], 'node': os.environ.get('SG_NODE', os.environ.get('SLURMD_NODENAME')), "
        "'reason_details': [{'code': 'sigint-ignored', 'text': 'pid 7 ignores SIGINT', 'pid': 7}]}))")


def slurm(**keys: object) -> SlurmConfig:
    return replace(defaults().slurm, **keys)


def test_the_remote_runs_the_guard_with_the_node_named_and_its_answer_is_the_json_line() -> None:
    config = slurm(remote=("/usr/bin/env", "SG_NODE={node}"), guard=(sys.executable, "-c", ECHO))
    doc = remote.ask(config, "node7", ["prepare", "--suspend"], local=False)
    assert not isinstance(doc, remote.NoAnswer), doc
    assert doc["node"] == "node7"
    assert doc["argv"] == ["slurm", "node", "prepare", "--suspend", "--as", "node7"]
    assert remote.reasons_of(doc) == [Reason("sigint-ignored", "pid 7 ignores SIGINT", pid=7)]


def test_a_local_node_is_asked_without_the_remote(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its guard is given the controller's SLURMD_NODENAME: it names itself as the controller does.
    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    config = slurm(remote=("/nonexistent/ssh", "{node}"), guard=(sys.executable, "-c", ECHO))
    doc = remote.ask(config, "node7", ["awake"], local=True)
    assert not isinstance(doc, remote.NoAnswer), doc
    assert doc["argv"] == ["slurm", "node", "awake", "--as", "node7"]


def test_no_answer_says_why_and_becomes_a_node_unreachable_reason() -> None:
    silent = slurm(remote=("/usr/bin/env",), guard=(sys.executable, "-c", "import sys; sys.exit(255)"))
    got = remote.ask(silent, "node7", ["prepare"], local=False)
    assert isinstance(got, remote.NoAnswer)
    assert "exit status 255" in got.why
    assert got.reason().code == "node-unreachable"
    assert "the guard on node7 did not answer" in got.reason().text

    missing = slurm(remote=("/nonexistent/ssh", "{node}"))
    got = remote.ask(missing, "node7", ["prepare"], local=False)
    assert isinstance(got, remote.NoAnswer) and "/nonexistent/ssh" in got.why

    garbled = slurm(remote=("/usr/bin/env",), guard=(sys.executable, "-c", "print('{not json')"))
    got = remote.ask(garbled, "node7", ["prepare"], local=False)
    assert isinstance(got, remote.NoAnswer) and "not JSON" in got.why


@pytest.mark.parametrize(("answer", "said"), [
    ({"verdict": "veto", "reason_details": 5}, "reason_details 5"),
    ({"verdict": "unknown", "reasons": [{"a": 1}]}, "reasons [{'a': 1}]"),
    ({"verdict": "maybe"}, "verdict 'maybe'"),
    ({"motd": "welcome"}, "verdict None"),
    ({"verdict": "allow", "observed": {"verdict": "veto", "reasons": 5}}, "reasons 5"),
    ({"verdict": "allow", "observed": ["veto"]}, "['veto'] where an object belongs"),
    ({"verdict": "allow"}, "node None"),  # every guard's answer names its node
    ({"verdict": "allow", "node": ["node7"]}, "node ['node7']"),
])
def test_an_answer_not_shaped_as_a_guard_s_is_none(answer: dict[str, object], said: str) -> None:
    # The last line that starts with "{": a login banner's JSON or another program's may be it.
    odd = slurm(remote=("/usr/bin/env",),
                guard=(sys.executable, "-c", f"print({json.dumps(json.dumps(answer))})"))
    got = remote.ask(odd, "node7", ["prepare"], local=False)
    assert isinstance(got, remote.NoAnswer), got
    assert got.why == f"its answer is not a guard's ({said})"


@pytest.mark.parametrize("local", [False, True])
def test_an_answer_another_node_s_guard_gives_is_none(
        monkeypatch: pytest.MonkeyPatch, local: bool) -> None:
    # A wrong ~/.ssh/config entry, a DNS alias, an address reused: node12's guard answers for
    # its own holders, never for node7's. Asked directly: this host is node12 to Slurm.
    monkeypatch.setenv("SLURMD_NODENAME", "node12")
    config = slurm(remote=("/usr/bin/env", "SG_NODE=node12"), guard=(sys.executable, "-c", ECHO))
    got = remote.ask(config, "node7", ["prepare"], local=local)
    assert isinstance(got, remote.NoAnswer), got
    assert got.why == ("answered as 'node12' (another host, or its host name is not its "
                       "NodeName: set [slurm] node_name there)")
    assert got.reason().code == "node-unreachable"


def test_a_node_that_does_not_answer_in_time_is_given_up() -> None:
    slow = slurm(remote=("/usr/bin/env",), guard=(sys.executable, "-c", "import time; time.sleep(30)"))
    got = remote.ask(slow, "node7", ["prepare"], local=False, timeout=0.5)
    assert isinstance(got, remote.NoAnswer) and "no answer within the timeout" in got.why


def test_the_slurm_reason_is_one_prefixed_line_and_is_known_as_ours() -> None:
    text = remote.slurm_reason(Reason("sigint-ignored", "pid 12 python3\nignores SIGINT " + "x" * 300))
    assert text.startswith("suspendguard: sigint-ignored: pid 12 python3 ignores SIGINT")
    assert "\n" not in text and len(text) <= 200
    assert remote.ours(text)
    assert not remote.ours("NHC: check_fs_mount failed") and not remote.ours("maintenance")


def test_template_replaces_every_node_placeholder() -> None:
    assert remote.template(["ipmitool", "-H", "{node}-bmc", "power", "soft"], "gpu3") == \
        ["ipmitool", "-H", "gpu3-bmc", "power", "soft"]
    assert json.loads(json.dumps(remote.template([], "x"))) == []


def test_somebody_elses_reason_is_kept_first_and_still_reads_as_held_by_the_guard() -> None:
    mine = remote.slurm_reason(Reason("sigint-ignored", "pid 12 python3 ignores SIGINT"))
    both = remote.joined("maintenance", mine)
    assert both == "maintenance (suspendguard: sigint-ignored: pid 12 python3 ignores SIGINT)"
    assert remote.held_by_guard(both) and not remote.ours(both)  # health leaves it to its owner
    assert remote.held_by_guard(mine) and not remote.held_by_guard("maintenance")
    assert not remote.held_by_guard("NHC: suspendguard: is just a word here")
    # A long reason of theirs is cut, not the guard's mark: the node still reads as held
    # (sync keeps it in SuspendExcNodes), and as not the guard's to lift.
    long = remote.joined("x" * 190, mine)
    assert len(long) <= 200 and long.startswith("x" * 100) and long.endswith(mine + ")")
    assert remote.held_by_guard(long) and not remote.ours(long)
    longest = remote.joined("x" * 190, remote.slurm_reason(Reason("sigint-ignored", "y" * 300)))
    assert len(longest) <= 200 and longest.endswith("…)")
    assert remote.held_by_guard(longest) and "(suspendguard: sigint-ignored: yyy" in longest

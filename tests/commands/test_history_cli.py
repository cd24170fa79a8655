"""``history ID``: one attempt whole, after real drains of real holders."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from helpers.holders import Holders
from helpers.records import finding

from suspendguard.cli import main
from suspendguard.store.history import History


def cli(conf: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["history", "--config", str(conf), *argv], out=out, err=err,
                environ={"COLUMNS": "80"})
    return code, out.getvalue(), err.getvalue()


def drain(conf: Path) -> dict[str, object]:
    result = subprocess.run([sys.executable, "-m", "suspendguard", "drain", "--config", str(conf),
                             "--yes", "--json"], stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode in (0, 1), result.stderr
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


def test_one_attempt_is_shown_whole_where_the_list_cuts_it(conf: Path, node: str,
                                                           holders: Holders) -> None:
    _, graceful = holders.start(node)
    _, deaf = holders.start(node, mode="deaf")
    vetoed = drain(conf)
    assert vetoed["verdict"] == "veto"
    [reason] = vetoed["reasons"]  # type: ignore[misc]
    assert len(reason) > 80 and str(deaf) in reason

    code, listed, _ = cli(conf)
    assert code == 0 and reason not in listed  # one line an attempt: the reason is cut

    code, out, err = cli(conf, "1")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("attempt 1: drain, ") and lines[0].endswith("(from cli)")
    assert lines[1:3] == ["verdict: VETO", f"  - {reason}"]
    rows = {line.split()[0]: line.split() for line in lines if line[:2] == "  "
            and line.split()[0].isdigit()}
    assert rows[str(graceful)][2:5] == ["drain", "1", "not-signalled"]
    assert rows[str(deaf)][2:5] == ["drain", "1", "not-signalled"]
    # Why each holder was left alone, whole, below the table.
    assert f"  pid {deaf}: ignores SIGINT" in lines
    assert f"  pid {graceful}: veto anyway: nobody is signalled" in lines

    # The next attempt does not hide this one: ID names exactly one.
    holders.cleanup()
    _, alone = holders.start(node)
    assert drain(conf)["verdict"] == "allow"
    code, out, _ = cli(conf, "2")
    assert code == 0 and out.splitlines()[1] == "verdict: ALLOW"
    [row] = [line.split() for line in out.splitlines() if line.split()[:1] == [str(alone)]]
    assert row[4:7] == ["exited", "after", row[6]] and row[6].replace(".", "").isdigit()
    assert cli(conf, "1")[1] == "\n".join(lines) + "\n"


def test_json_of_one_attempt_is_its_entry_of_the_list(conf: Path, node: str,
                                                      holders: Holders) -> None:
    holders.start(node)
    drain(conf)
    holders.cleanup()
    drain(conf)
    _, whole, _ = cli(conf, "--json")
    code, one, _ = cli(conf, "1", "--json")
    assert code == 0
    assert json.loads(one) == {"attempts": [json.loads(whole)["attempts"][1]]}


def test_findings_and_the_steps_after_it_are_shown(conf: Path, node: str,
                                                   holders: Holders) -> None:
    holders.start(node)
    drain(conf)
    state = str(conf.parent / "state")
    with History.open(state) as h:
        h.record_findings(1, [finding("hwts-busy")])
        h.record_event("post", "suspend", "resumed; devices checked", attempt_id=1)
    _, out, _ = cli(conf, "1")
    text = out.split("\n\n")
    [found] = [part for part in text if part.startswith("found in the device logs")]
    assert found.splitlines()[0] == "found in the device logs after resume: 1"
    assert found.splitlines()[2].split()[:3] == ["error", "hwts-busy",
                                                 "/var/log/npu/slog/device-0.log:1"]
    [after] = [part for part in text if part.startswith("after the attempt:")]
    assert after.splitlines()[2].split()[-5:] == ["post", "suspend", "resumed;", "devices",
                                                  "checked"]


def test_an_attempt_never_recorded_is_one_line_and_exit_2(conf: Path, node: str,
                                                          holders: Holders) -> None:
    holders.start(node)
    drain(conf)
    for argv, words in ((["7"], "no attempt 7 in"), (["0"], "ID must be between 1 and"),
                        (["7", "--json"], "no attempt 7 in")):
        code, out, err = cli(conf, *argv)
        assert (code, out) == (2, ""), (argv, out)
        assert err.count("\n") == 1 and words in err, err


def test_an_observed_look_is_told_from_a_real_veto(conf: Path, node: str,
                                                   holders: Holders) -> None:
    # Observe mode's look is recorded with the verdict an enforced run would give: the list and
    # the attempt say it was only a look, so a veto there is not taken for a refused suspend.
    _, deaf = holders.start(node, mode="deaf")
    main(["mode", "observe", "--config", str(conf)], out=io.StringIO(), err=io.StringIO(),
         environ={})
    assert main(["pre-sleep", "suspend", "--config", str(conf)], out=io.StringIO(),
                err=io.StringIO(), environ={}) == 0
    code, listed, _ = cli(conf)
    assert code == 0
    [row] = [line.split() for line in listed.splitlines() if line.startswith("1 ")]
    assert row[4:7] == ["suspend", "would", "veto"], listed
    code, out, _ = cli(conf, "1")
    lines = out.splitlines()
    assert lines[0].startswith("attempt 1: suspend (observed), ") and lines[0].endswith("(from unit)")
    assert lines[1] == ("verdict: VETO (observe mode: what it would have said; it signalled "
                        "nobody and refused nothing)")
    assert str(deaf) in lines[2]
    [doc] = json.loads(cli(conf, "--json")[1])["attempts"]
    assert (doc["action"], doc["dry_run"], doc["verdict"]) == ("suspend", True, "veto")


def test_an_owner_kind_a_newer_version_wrote_is_shown_by_its_word(
        conf: Path, node: str, holders: Holders) -> None:
    import sqlite3

    holders.start(node)
    assert drain(conf)["verdict"] == "allow"
    with sqlite3.connect(conf.parent / "state" / "history.db") as db:
        assert db.execute("UPDATE holders SET owner = 'lxc:box1'").rowcount == 1
    code, out, err = cli(conf, "1")
    assert (code, err) == (0, ""), err
    assert any(line.endswith("run by lxc box1") for line in out.splitlines()), out


def test_an_attempt_asked_for_before_any_history_is_one_line_and_exit_2(conf: Path) -> None:
    import sqlite3

    state = conf.parent / "state"
    db = state / "history.db"
    # No history.db at all, then one the first guard made without its tables yet.
    for made, why in ((False, f"({db} does not exist)"), (True, f"({db} has no attempts table yet)")):
        if made:
            state.mkdir()
            sqlite3.connect(db).close()
        for argv in (["7"], ["7", "--json"]):
            code, out, err = cli(conf, *argv)
            assert (code, out) == (2, ""), (argv, out)
            assert err == f"suspendguard: history: no attempt 7 in {state}: no history yet {why}\n"
        # The list with no history is an answer, not a mistake.
        code, out, err = cli(conf)
        assert (code, out, err) == (0, f"history: no history yet {why}\n", "")
        code, out, _ = cli(conf, "--json")
        assert code == 0 and json.loads(out)["attempts"] == []

"""``suspendguard status`` on jobs the guard stopped and has not brought back, from a real history."""

from __future__ import annotations

import io
import json
from pathlib import Path

from helpers.records import ended

from suspendguard.cli import main
from suspendguard.model import Owner, OwnerKind
from suspendguard.record import Stop
from suspendguard.store.history import History

T0 = 1_700_000_000.0
USER_START = ("setpriv --reuid=1000 --regid=$(id -g 1000) --clear-groups env "
              "XDG_RUNTIME_DIR=/run/user/1000 systemctl --user start train.service")


def stop(seq: int, name: str, kind: OwnerKind = "systemd-service", uid: int | None = None) -> Stop:
    return Stop(Owner(kind, name, uid=uid), seq=seq, stopped=T0 + seq)


def make_history(state_dir: Path) -> None:
    """Eight attempts: stops in the first two (older than the five status lists) and the last."""
    with History.open(str(state_dir)) as h:
        first = h.begin("suspend", "unit", False, "digest", T0)
        h.finish(ended(first, "allow", finished=T0 + 2,
                 stops=[stop(0, "infer.service"), stop(1, "web.service")]))
        second = h.begin("suspend", "unit", False, "digest", T0 + 100)
        h.finish(ended(second, "veto", reasons=["pid 77 infer ignores SIGINT"], finished=T0 + 101,
                 stops=[stop(0, "batch.service"), stop(1, "train.service", "user-service", 1000)]))
        for row in h.not_restored():
            if row.owner.name == "infer.service":
                h.record_restore(row.id, "started", "")
            elif row.owner.name in ("web.service", "train.service"):
                h.record_restore(row.id, "failed", "the start job ended with the unit failed")
        for i in range(5):
            quiet = h.begin("suspend", "unit", False, "digest", T0 + 200 + i)
            h.finish(ended(quiet, "allow", finished=T0 + 200.5 + i))
        last = h.begin("suspend", "unit", False, "digest", T0 + 300)
        h.finish(ended(last, "allow", finished=T0 + 301, stops=[stop(0, "web.service")]))


def status(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["status", *argv], out=out, err=err, environ={})
    return code, out.getvalue()


def test_status_lists_every_job_not_brought_back_with_the_command_to_run(
        conf: Path, no_bus: str) -> None:
    make_history(conf.parent / "state")
    code, out = status("--config", str(conf))
    assert code == 0
    lines = out.splitlines()
    head = lines.index("stopped by the guard, not started again: 3")
    assert lines[head + 1].split() == ["OWNER", "STOPPED", "ATTEMPT", "RESTORE"]
    rows = lines[head + 2:head + 5]
    # oldest first; the second attempt is older than the five attempts listed
    # below, and web.service counts once, by its newest stop (pending again)
    assert [r.split()[0] for r in rows] == ["systemd-service:batch.service",
                                            "user-service:1000:train.service",
                                            "systemd-service:web.service"]
    assert rows[0].split()[-2:] == ["#2", "pending"]
    assert rows[1].split(maxsplit=5)[4:] == ["#2", "failed: the start job ended with the unit failed"]
    assert rows[2].split()[-2:] == ["#8", "pending"]
    assert lines[head + 5:head + 7] == [
        f"  to start again: suspendguard --config {conf} restore",
        f"  to start again: {USER_START}",
    ]
    assert not any("infer.service" in line for line in lines)  # it was started again
    # the section comes before the installation, right after the holders
    assert head < next(i for i, line in enumerate(lines) if line.startswith("installation:"))

    code, out = status("--json", "--config", str(conf))
    down = json.loads(out)["history"]["not_restored"]
    assert [(d["name"], d["attempt"], d["result"]) for d in down] == [
        ("batch.service", 2, "pending"), ("train.service", 2, "failed"),
        ("web.service", 8, "pending")]
    assert down[1]["restore_command"] == USER_START
    assert down[0]["restore_command"] == f"suspendguard --config {conf} restore"


def test_nothing_down_no_section(conf: Path, no_bus: str) -> None:
    with History.open(str(conf.parent / "state")) as h:
        one = h.begin("suspend", "unit", False, "digest", T0)
        h.finish(ended(one, "allow", finished=T0 + 1, stops=[stop(0, "infer.service")]))
        [row] = h.not_restored()
        h.record_restore(row.id, "started", "")
    code, out = status("--config", str(conf))
    assert code == 0 and "stopped by the guard" not in out
    assert json.loads(status("--json", "--config", str(conf))[1])["history"]["not_restored"] == []


def test_after_resume_off_says_restore_will_not_start_them(conf: Path, no_bus: str) -> None:
    conf.write_text(conf.read_text() + "[restore]\nafter_resume = false\n")
    with History.open(str(conf.parent / "state")) as h:
        one = h.begin("suspend", "unit", False, "digest", T0)
        h.finish(ended(one, "allow", finished=T0 + 1, stops=[stop(0, "infer.service")]))
    _, out = status("--config", str(conf))
    assert "[restore] after_resume = false: restore then only removes the drain drop-ins" in out


def test_status_says_starting_issuing_and_a_containers_own_start(conf: Path, no_bus: str) -> None:
    cid = "c" * 64
    with History.open(str(conf.parent / "state")) as h:
        attempt = h.begin("suspend", "unit", False, "digest", T0)
        h.finish(ended(attempt, "veto", reasons=["x"], finished=T0 + 1,
                 stops=[stop(0, "slow.service"), stop(1, cid, "docker")]))
        h.stopping(attempt, [stop(2, "cut.service")])  # the guard killed while it issued it
        for row in h.not_restored():
            if row.owner.name == "slow.service":
                h.record_restore(row.id, "starting", "its start job still ran")
            elif row.owner.name == cid:
                h.record_restore(row.id, "failed", "still stopping")
    code, out = status("--config", str(conf))
    assert code == 0
    assert "starting when restore ended" in out
    assert "pending (the guard ended while it issued the stop)" in out
    assert "to see whether it came up: systemctl status slow.service" in out
    assert f"to start again: docker start {cid}" in out

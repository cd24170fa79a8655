"""The drain drop-in's text: what systemd reads while the guard drains a unit."""

from __future__ import annotations

from suspendguard.supervise.dropin import dropin_text, exec_path, stop_timeout


def test_the_drop_in_keeps_the_unit_down_and_removes_its_marker_with_full_privileges() -> None:
    text = dropin_text("SIGINT", "/run/systemd/system/a.service.d/suspendguard-stopped")
    assert text.splitlines()[1:] == [
        "[Service]", "Restart=no", "KillSignal=SIGINT",
        "ExecStartPre=-+/bin/rm -f /run/systemd/system/a.service.d/suspendguard-stopped"]


def test_escaped_unit_names_and_specifiers_survive_systemd_unescaping() -> None:
    # systemd turns "\\x2d" back into "\x2d" and "%%" into "%" on an ExecStart= line
    assert exec_path("/run/systemd/system/sv\\x2dhard.service.d/m") == \
        "/run/systemd/system/sv\\\\x2dhard.service.d/m"
    assert exec_path("/run/a%i.service.d/m") == "/run/a%%i.service.d/m"


def test_a_stop_timeout_shorter_than_the_drain_is_raised_and_others_kept() -> None:
    assert stop_timeout(1.0, 4.0) == 5.0
    assert stop_timeout(90.0, 4.0) is None
    assert stop_timeout(0.0, 4.0) is None  # infinite, or not known
    assert "TimeoutStopSec=5s\n" in dropin_text("SIGINT", "/m", stop_timeout(1.0, 4.0))

"""system/usermanager.py and the runner's switch to another user: real children, no systemd needed."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from helpers.users import unknown_uid

from suspendguard.model import Unavailable
from suspendguard.supervise import usermanager
from suspendguard.system import runner

NOBODY = pwd.getpwnam("nobody")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_child_runs_as_the_user_with_its_group_only() -> None:
    result = runner.run(["sh", "-c", "id -u; id -g; id -G"], 10.0,
                        as_user=(NOBODY.pw_uid, NOBODY.pw_gid))
    assert result.ok, result.describe_failure()
    assert result.stdout.split() == [str(NOBODY.pw_uid), str(NOBODY.pw_gid), str(NOBODY.pw_gid)]


def test_the_manager_is_asked_at_its_private_socket(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(usermanager, "runtime_dir", lambda uid: str(tmp_path))
    assert usermanager.manager_address(NOBODY.pw_uid) == \
        f"unix:path={tmp_path}/systemd/private"


def test_a_user_without_a_running_manager_is_unavailable_with_why() -> None:
    answer = usermanager.manager_address(NOBODY.pw_uid)
    assert isinstance(answer, Unavailable)
    assert answer.reason == (f"the manager of uid {NOBODY.pw_uid} does not run "
                             f"(/run/user/{NOBODY.pw_uid} is absent)")


def test_an_unknown_uid_is_unavailable() -> None:
    uid = unknown_uid()
    answer = usermanager.manager_address(uid)
    assert isinstance(answer, Unavailable) and answer.reason == f"uid {uid} has no user account"
    written = usermanager.write_file(uid, "/nonexistent/x", "")
    assert isinstance(written, Unavailable) and written.reason == f"uid {uid} has no user account"

"""The shipped systemd files: rendered as install renders them, checked by systemd itself."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO
from helpers.journal import parse

from suspendguard.config import build, defaults
from suspendguard.install import templates
from suspendguard.model import SLEEP_ACTIONS
from suspendguard.system.journal_ids import MESSAGE_IDS

SHIPPED = REPO / "systemd"
UNIT = (SHIPPED / templates.UNIT_TEMPLATE).read_text()
HOOK = (SHIPPED / templates.HOOK_TEMPLATE).read_text()

needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


def _verify(unit_dir: Path, name: str) -> subprocess.CompletedProcess[str]:
    # --man=no: the Documentation= URL is not a man page to look up offline.
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit_dir / name)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"},
    )


def _render(tmp_path: Path, **kwargs: object) -> Path:
    text = templates.render_unit(UNIT, sys.executable, 120, **kwargs)  # type: ignore[arg-type]
    (tmp_path / templates.UNIT_TEMPLATE).write_text(text)
    return tmp_path


def test_template_dir_is_the_shipped_folder(tmp_path: Path) -> None:
    assert templates.template_dir() == SHIPPED
    # installed without the systemd/ files (a wheel that does not ship them): one clear line
    with pytest.raises(templates.InstallError, match="shipped unit files are missing") as exc:
        templates.template_dir(tmp_path / "site-packages" / "suspendguard")
    assert "\n" not in str(exc.value) and exc.value.exit_status == 3


def test_shipped_files_document_the_defaults() -> None:
    assert re.search(r"^TimeoutStartSec=120$", UNIT, re.M)
    assert templates.timeout_start_s(defaults()) == 120
    assert re.search(r"^ExecStart=/usr/bin/python3 -I -m suspendguard pre-sleep %i$", UNIT, re.M)
    assert os.access(SHIPPED / templates.HOOK_TEMPLATE, os.X_OK)


@pytest.mark.parametrize("name", [templates.UNIT_TEMPLATE, templates.RESUME_UNIT,
                                  templates.WATCH_UNIT])
def test_units_keep_the_state_folder_roots_alone(name: str) -> None:
    """systemd sets a StateDirectory= to its mode (0755 unless told) at every start."""
    text = (SHIPPED / name).read_text()
    assert re.findall(r"^StateDirectory=(.*)$", text, re.M) == ["suspendguard"]
    assert re.findall(r"^StateDirectoryMode=(.*)$", text, re.M) == ["0700"]


def test_unit_is_the_veto_shape() -> None:
    def values(key: str) -> list[str]:
        return re.findall(rf"^{key}=(.*)$", UNIT, re.M)

    assert values("Type") == ["oneshot"]
    assert values("DefaultDependencies") == ["no"]
    # NVIDIA's nvidia-%i.service prepares the GPU for sleep: after the drain, never after a veto
    assert values("Before") == ["systemd-%i.service nvidia-%i.service"]
    assert values("RequiredBy") == ["systemd-%i.service nvidia-%i.service"]
    assert tuple(n.replace("{}", "%i") for n in templates.REQUIRED_BY) == tuple(
        values("RequiredBy")[0].split())
    assert values("StandardOutput") == ["journal"]
    # What it must keep: /dev visible, every process visible, root's powers to read and signal.
    assert not values("PrivateDevices") and not values("ProtectProc") and not values("User")
    caps = values("CapabilityBoundingSet")[0].split()
    assert {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_KILL", "CAP_SETUID", "CAP_SETGID"} <= set(caps)
    # /proc/PID/map_files: checkpoint_restore_ns_capable() in the kernel
    assert "CAP_SYS_ADMIN" in caps
    assert values("ProtectSystem") == ["strict"]
    # homes read-only as ProtectHome=read-only makes them, but /run/user writable
    assert values("ReadOnlyPaths") == ["-/home -/root"] and not values("ProtectHome")
    assert values("StateDirectory") == ["suspendguard"]
    # No private /tmp: it would hide an interpreter living there (see the unit).
    assert not values("PrivateTmp")
    assert values("ReadWritePaths") == ["-/var/log/npu -/root/ascend -/run/systemd/system -/run/user"]
    for key in ("NoNewPrivileges", "ProtectKernelTunables", "ProtectKernelModules",
                "ProtectKernelLogs", "ProtectControlGroups", "RestrictNamespaces",
                "LockPersonality"):
        assert values(key) == ["yes"], key
    # IP for a Jupyter kernel's shutdown_request alone ([drain] jupyter): on loopback only
    assert values("RestrictAddressFamilies") == ["AF_UNIX AF_INET AF_INET6"]
    assert values("IPAddressDeny") == ["any"] and values("IPAddressAllow") == ["localhost"]


def test_render_unit_sets_interpreter_and_timeout() -> None:
    config = build({"drain": {"deadline_s": 46.5}})
    text = templates.render_unit(UNIT, "/opt/sg venv/bin/python", templates.timeout_start_s(config))
    assert re.findall(r"^TimeoutStartSec=(.*)$", text, re.M) == ["67"]
    assert re.findall(r"^ExecStart=(.*)$", text, re.M) == [
        '"/opt/sg venv/bin/python" -I -m suspendguard pre-sleep %i'
    ]
    assert not re.search(r"^Environment=", text, re.M)
    assert re.findall(r"^ReadWritePaths=(.*)$", text, re.M) == [
        "-/var/log/npu -/root/ascend -/run/systemd/system -/run/user"]


def test_render_unit_state_dir_and_config_elsewhere() -> None:
    text = templates.render_unit(UNIT, "/usr/bin/python3", 120, "/srv/sg/state", "/srv/sg/c%1.toml")
    assert re.findall(r"^ReadWritePaths=(.*)$", text, re.M) == [
        "-/srv/sg/state", "-/var/log/npu -/root/ascend -/run/systemd/system -/run/user"]
    assert re.findall(r"^Environment=(.*)$", text, re.M) == [
        '"SUSPENDGUARD_CONFIG=/srv/sg/c%%1.toml"'
    ]


def test_render_hook() -> None:
    text = templates.render_hook(HOOK, "/opt/venv/bin/python")
    assert "PYTHON=/opt/venv/bin/python\n" in text
    assert '"$PYTHON" -I -m suspendguard sleep-hook "$1" "$2"' in text
    assert text.rstrip().endswith("exit 0")
    text = templates.render_hook(HOOK, "/opt/venv/bin/python", "/etc/x y.toml")
    assert "export SUSPENDGUARD_CONFIG='/etc/x y.toml'\n" in text


def test_render_refuses_a_template_without_the_key() -> None:
    with pytest.raises(templates.InstallError, match="exactly one ExecStart="):
        templates.render_unit(UNIT.replace("ExecStart=", "#ExecStart="), "/usr/bin/python3", 120)


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_hook_always_exits_0(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\nexit 7\n")
    fake.chmod(0o755)
    hook = tmp_path / "hook"
    hook.write_text(templates.render_hook(HOOK, str(fake)))
    hook.chmod(0o755)
    result = subprocess.run([str(hook), "pre", "suspend"], capture_output=True, timeout=30)
    assert result.returncode == 0
    assert (tmp_path / "args").read_text() == "-I -m suspendguard sleep-hook pre suspend\n"
    missing = tmp_path / "hook2"
    missing.write_text(templates.render_hook(HOOK, str(tmp_path / "nonexistent")))
    missing.chmod(0o755)
    assert subprocess.run([str(missing), "post", "suspend"], capture_output=True,
                          timeout=30).returncode == 0


@needs_analyze
@pytest.mark.parametrize("action", SLEEP_ACTIONS)
def test_systemd_analyze_verify_instance(tmp_path: Path, action: str) -> None:
    unit_dir = _render(tmp_path)
    result = _verify(unit_dir, templates.instance(action))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "suspendguard@" not in result.stderr, result.stderr


@needs_analyze
def test_systemd_analyze_verify_with_state_dir_and_config(tmp_path: Path) -> None:
    unit_dir = _render(tmp_path, state_dir="/srv/sg state", config_path="/srv/c.toml")
    result = _verify(unit_dir, templates.instance("suspend"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "suspendguard@" not in result.stderr, result.stderr


@needs_analyze
def test_systemd_analyze_verify_catches_a_bad_interpreter(tmp_path: Path) -> None:
    """The check above is worth something: a missing interpreter fails it."""
    text = templates.render_unit(UNIT, "/nonexistent/python", 120)
    (tmp_path / templates.UNIT_TEMPLATE).write_text(text)
    result = _verify(tmp_path, templates.instance("suspend"))
    assert result.returncode != 0
    assert "/nonexistent/python" in result.stderr


def test_resume_unit_may_check_and_repair_the_devices() -> None:
    """The health check runs in the resume unit: what it needs must not be sandboxed away."""
    text = (SHIPPED / templates.RESUME_UNIT).read_text()

    def values(key: str) -> list[str]:
        return re.findall(rf"^{key}=(.*)$", text, re.M)

    caps = set(values("CapabilityBoundingSet")[0].split())
    # open the nodes, read every process's fds before a repair, reload nvidia_uvm, continue
    # a user's launcher a killed guard run left stopped
    assert {"CAP_DAC_OVERRIDE", "CAP_SYS_PTRACE", "CAP_SYS_MODULE", "CAP_SETUID",
            "CAP_KILL"} <= caps
    assert not values("ProtectKernelModules") and not values("MemoryDenyWriteExecute")
    assert "nvidia-resume.service" in " ".join(values("After"))
    assert int(values("TimeoutStartSec")[0]) >= 300
    # npu-smi and pyACL write their own logs, after resume as before the sleep
    assert {"-/var/log/npu", "-/root/ascend"} <= set(values("ReadWritePaths")[0].split())
RESUME = (SHIPPED / templates.RESUME_UNIT).read_text()


def test_resume_unit_runs_after_the_sleep_and_nvidias_resume() -> None:
    after = " ".join(re.findall(r"^After=(.*)$", RESUME, re.M)).split()
    assert {f"systemd-{a}.service" for a in SLEEP_ACTIONS} <= set(after)
    # A restored CUDA service must not start before the driver has resumed the GPU.
    assert "nvidia-resume.service" in after


@needs_analyze
def test_resume_unit_verifies_where_nvidia_resume_does_not_exist(tmp_path: Path) -> None:
    """After= on a unit that does not exist (no NVIDIA driver here) is harmless."""
    (tmp_path / templates.RESUME_UNIT).write_text(templates.render_resume(RESUME, sys.executable))
    result = _verify(tmp_path, templates.RESUME_UNIT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nvidia-resume" not in result.stderr, result.stderr


def test_the_catalog_sends_the_operator_to_the_entrys_own_attempt() -> None:
    """``history -n 1`` is the newest attempt's row, not this entry's attempt whole: an entry
    that carries its attempt names ``history ATTEMPT``, and none names ``history -n``."""
    entries = {e.id: e for e in parse()}
    assert not [e.id for e in entries.values() if "history -n" in e.body]
    for name in ("veto", "allow-after-drain", "restore-failed"):
        assert "suspendguard history @SUSPENDGUARD_ATTEMPT@" in entries[MESSAGE_IDS[name]].body

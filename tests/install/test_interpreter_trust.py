"""Root runs the units' interpreter, and the guard's code it imports, at every suspend:
install refuses what others could change, and doctor reports it."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from helpers.isolation import needs_root

from suspendguard.doctor.units import untrusted_interpreter
from suspendguard.errors import EXIT_UNTRUSTED, InstallError
from suspendguard.install.interpreter import Interpreter, probe, refuse_untrusted, untrusted

# The environment the suite runs in: pyvenv.cfg beside bin/ makes it one.
VENV = Path(sys.executable).parent.parent


@needs_root
def test_an_interpreter_in_a_folder_others_may_write_is_refused_unless_forced(
        tmp_path: Path) -> None:
    if not (VENV / "pyvenv.cfg").is_file():
        pytest.skip("the suite does not run in a virtual environment")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)  # a group may replace what it holds
    (shared / "venv").symlink_to(VENV)
    python = str(shared / "venv" / "bin" / "python")
    found = probe(python)
    assert found.usable, found.reason  # it runs the guard: only its place is wrong
    assert found.untrusted == (
        f"the units' interpreter {python} ({shared}): group-writable (mode 0775)",)

    with pytest.raises(InstallError) as refused:
        refuse_untrusted(found, force=False, err=io.StringIO())
    assert refused.value.exit_status == EXIT_UNTRUSTED  # as a configuration root may not trust
    assert str(refused.value).startswith(found.untrusted[0] + ": root runs it at every suspend")
    assert str(refused.value).endswith(", or pass --force")
    err = io.StringIO()
    refuse_untrusted(found, force=True, err=err)
    assert err.getvalue().startswith(f"suspendguard: install: warning: {found.untrusted[0]}")
    assert err.getvalue().count("\n") == 1
    [finding] = untrusted_interpreter(found)
    assert (finding.id, finding.severity) == ("guard-interpreter-untrusted", "error")
    assert finding.text.startswith(found.untrusted[0]) and python in finding.fix

    # The same environment by a path only root can change passes, and nothing is said.
    own = probe(sys.executable)
    assert own.usable and own.untrusted == (), own
    err = io.StringIO()
    refuse_untrusted(own, force=False, err=err)
    assert err.getvalue() == "" and untrusted_interpreter(own) == []


@needs_root
def test_a_file_of_the_guard_s_code_others_may_write_is_named(tmp_path: Path) -> None:
    package = tmp_path / "suspendguard"
    package.mkdir()
    (package / "__init__.py").write_text("")
    writable = package / "cli.py"
    writable.write_text("")
    writable.chmod(0o646)
    [why] = untrusted(sys.executable, str(package))
    assert why == (f"the units' interpreter {sys.executable} imports the guard's code "
                   f"{writable}: world-writable (mode 0646)")
    found = Interpreter(sys.executable, True, untrusted=(why,))
    with pytest.raises(InstallError) as refused:  # the line names the interpreter
        refuse_untrusted(found, force=False, err=io.StringIO())
    assert str(refused.value).startswith(f"{why}: root runs it at every suspend")
    writable.chmod(0o644)
    assert untrusted(sys.executable, str(package)) == ()

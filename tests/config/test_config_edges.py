"""Configurations that once ended in a traceback, the built-in defaults or a wrong line:
each is one line naming the file and key, exit status 2."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from helpers.runners import cli, config_cli

from suspendguard.config import build
from suspendguard.errors import ConfigError

# The module, not the function config/__init__.py names the same.
load_module = importlib.import_module("suspendguard.config.load")

# TOML's hexadecimal integers have no length limit; Python turns none of over 4300 digits
# into text.
HEX_4000 = "0x" + "f" * 4000


def refused(path: Path, text: str) -> str:
    """``config`` of ``text`` at ``path``: exit 2, one line starting with the path; that line."""
    code, out, err = config_cli(path, text)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith(f"suspendguard: {path}: "), err
    return err


@pytest.mark.parametrize(("text", "expected"), [
    (f"[policy]\nkubernetes = {HEX_4000}\n",
     '[policy] kubernetes (line 2): expected one of "veto", "drain", got an integer of about '
     "4817 digits"),
    (f"[policy]\nkubernetes = [{HEX_4000}]\n",
     "[policy] kubernetes (line 2): expected one of \"veto\", \"drain\", got a list holding an "
     "integer too long to show"),
    (f'[[drain.launchers]]\nexe = "/x"\nstop = {HEX_4000}\n',
     "[drain] launchers (line 1): entry 1: stop must be one of \"forward\", \"hold\", \"ranks\", "
     "got an integer of about 4817 digits"),
    (f"[[policy.drain]]\nuid = 0\ntimeout_s = [{HEX_4000}]\n",
     "entry 1: timeout_s must be a number > 0 and at most 86400, got a list holding an integer"),
    ('[slurm]\nexclude = ["n:' + "9" * 4400 + '"]\n',
     "[slurm] exclude (line 2): expected each count from 1 to the number of names in its set, "
     "got a count of 4400 digits"),
])
def test_an_integer_too_long_for_text_anywhere_is_one_line(tmp_path: Path, text: str,
                                                           expected: str) -> None:
    err = refused(tmp_path / "c.toml", text)
    assert expected in err and len(err) < 400, err


def test_a_value_error_in_any_check_names_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever a check did not foresee raising ValueError, the key is named, no traceback.
    validate = load_module.validate

    def failing(spec: Any, value: Any) -> Any:
        if value == "drain":
            raise ValueError("Exceeds the limit (4300 digits)")
        return validate(spec, value)

    monkeypatch.setattr(load_module, "validate", failing)
    with pytest.raises(ConfigError, match=r"^c.toml: \[policy\] kubernetes \(line 2\): cannot be "
                                          r"read \(Exceeds the limit \(4300 digits\)\)$"):
        build({"policy": {"kubernetes": "drain"}}, "c.toml", '[policy]\nkubernetes = "drain"\n')


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_dangling_symlink_at_the_default_path_is_no_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    # The site's file lost from under its link: the defaults would drop its protect rules.
    if where == "file":
        link = default = tmp_path / "config.toml"
    else:
        link = tmp_path / "suspendguard"
        default = link / "config.toml"
    link.symlink_to(tmp_path / "gone")
    monkeypatch.setattr(load_module, "DEFAULT_PATH", str(default))
    code, out, err = cli("config")
    assert (code, out) == (2, ""), err
    assert err == (f"suspendguard: {default}: the symlink {link} leads nowhere: the configuration "
                   "it named is lost (remove the link for the built-in defaults)\n")
    # No link at all: the built-in defaults, as before.
    link.unlink()
    code, out, err = cli("config")
    assert code == 0 and "[drain]" in out, err


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\u2029"])
def test_a_line_separator_in_a_comment_does_not_shift_the_line(tmp_path: Path,
                                                              separator: str) -> None:
    err = refused(tmp_path / "c.toml", f"[drain]\n# one{separator}comment\ntimeout_s = -1\n")
    assert "[drain] timeout_s (line 3): expected a number" in err, err
    err = refused(tmp_path / "c.toml", f"# a{separator}b\n[[policy.drain]]\nuid = 0\n")
    assert "[policy] drain (line 2): entry 1: needs timeout_s" in err, err


@pytest.mark.parametrize("key", ["ascend_env", "dcmi_library"])
def test_a_relative_idle_path_is_refused(tmp_path: Path, key: str) -> None:
    # The probe that sources or loads it runs in /, not in the folder it was checked from.
    err = refused(tmp_path / "c.toml", f'[idle]\n{key} = "cann/lib"\n')
    assert (f"[idle] {key} (line 2): expected an absolute path or \"\" (the default places), "
            "got 'cann/lib'") in err, err
    code, _, err = config_cli(tmp_path / "c.toml", f'[idle]\n{key} = ""\n')
    assert code == 0, err

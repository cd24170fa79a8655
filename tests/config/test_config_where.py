"""Where a configuration error points: its file's path, shown safely, and the line of the entry."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.runners import cli, config_cli

# A newline and an ESC: printed raw, they would split the error line in two and
# send a colour change to the terminal.
ODD_NAME = "c\nfake line\x1b[31m.toml"
ODD_SHOWN = "c\\nfake line\\e[31m.toml"


def one_escaped_line(err: str) -> str:
    """``err``, checked to be one line without a raw control character."""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert not any(c in err[:-1] for c in "\x1b\r\n\x9b"), err
    return err


@pytest.mark.parametrize("how", ["--config", "SUSPENDGUARD_CONFIG"])
def test_a_missing_file_with_control_characters_is_named_escaped(tmp_path: Path, how: str) -> None:
    path = str(tmp_path / ODD_NAME)
    if how == "--config":
        code, out, err = cli("--config", path, "config")
    else:
        code, out, err = cli("config", environ={"SUSPENDGUARD_CONFIG": path})
    assert (code, out) == (2, ""), err
    assert one_escaped_line(err) == (
        f"suspendguard: {tmp_path}/{ODD_SHOWN}: configuration file not found\n")


@pytest.mark.parametrize(("text", "expected"), [
    ("[drain]\ntimeout_s = -1\n", f"{ODD_SHOWN}: [drain] timeout_s (line 2): expected a number"),
    ("[drian]\n", f"{ODD_SHOWN}: unknown section [drian]"),
    ("[drain\n", f"{ODD_SHOWN}: TOML syntax error"),
    ("[drain]\ntimeout_s = 30\ndeadline_s = 20\n", f"{ODD_SHOWN}: [drain] deadline_s (line 3)"),
    ('[[policy.ignore]]\nuid = "0"\n', f"{ODD_SHOWN}: [policy] ignore (line 1): entry 1: uid"),
])
def test_a_bad_file_with_control_characters_in_its_path_is_named_escaped(
        tmp_path: Path, text: str, expected: str) -> None:
    code, out, err = config_cli(tmp_path / ODD_NAME, text)
    assert (code, out) == (2, ""), err
    assert expected in one_escaped_line(err), err


THREE_RULES = ('[[policy.protect]]\ncomm = "a"\n\n'
               '[drain]\ntimeout_s = 10\n\n'
               '[[policy.protect]]  # the second\ncomm = "b"\n\n'
               '[[policy.protect]]\nuid = "x"\n')


@pytest.mark.parametrize(("text", "expected"), [
    # Each entry of an array of tables starts at its own [[...]] header.
    (THREE_RULES, "[policy] protect (line 10): entry 3: uid must be an integer"),
    ('[[drain.launchers]]\nexe = "/opt/a"\nstop = "hold"\n'
     '[[drain.launchers]]\nexe = "/opt/b"\nstop = "pause"\n',
     "[drain] launchers (line 4): entry 2: stop must be one of"),
    ('[[policy.drain]]\nuid = 0\ntimeout_s = 5\n[[policy.drain]]\nuid = 1\ntimeout_s = 5\n'
     '[[policy.drain]]\nuid = 2\ntimeout_s = 5\n[[policy.drain]]\nuid = 3\n',
     "[policy] drain (line 10): entry 4: needs timeout_s"),
    # An inline array has no header per entry: the line is its key's.
    ('[policy]\n\nignore = [{ comm = "a" }, { uid = "x" }]\n',
     "[policy] ignore (line 3): entry 2: uid must be an integer"),
])
def test_an_entry_error_gives_the_line_of_that_entry(tmp_path: Path, text: str,
                                                    expected: str) -> None:
    code, out, err = config_cli(tmp_path / "bad.toml", text)
    assert (code, out) == (2, ""), err
    assert expected in one_escaped_line(err), err


def test_an_entry_whose_header_is_spelled_otherwise_gets_no_line(tmp_path: Path) -> None:
    # A quoted header is the same array, but the headers counted are fewer than the entries:
    # which header starts entry 2 is not known, and no line beats a wrong one.
    path = tmp_path / "bad.toml"
    code, out, err = config_cli(path, '[[policy.protect]]\ncomm = "a"\n'
                                      '[[policy."protect"]]\nuid = "x"\n')
    assert (code, out) == (2, ""), err
    assert one_escaped_line(err).startswith(
        f"suspendguard: {path}: [policy] protect: entry 2: uid must be an integer"), err


def test_an_untrusted_file_with_control_characters_in_its_path_is_named_escaped(
        tmp_path: Path) -> None:
    """The trust rule's refusal (root, a file others may change) names the path too."""
    if os.geteuid() != 0:
        pytest.skip("the trust rule is root's")
    path = tmp_path / ODD_NAME
    path.write_text("")
    path.chmod(0o666)
    code, out, err = cli("--config", str(path), "config")
    assert (code, out) == (4, ""), err
    assert f"{ODD_SHOWN}: group- and world-writable (mode 0666)" in one_escaped_line(err), err

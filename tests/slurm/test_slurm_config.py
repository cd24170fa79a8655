"""The [slurm] section: its defaults, and each bad value refused in one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.journal import entries, standing_in
from helpers.runners import cli, config_cli

from suspendguard.config.load import defaults


def test_the_defaults_ask_through_ssh_and_keep_an_exclusion_file() -> None:
    slurm = defaults().slurm
    assert slurm.remote[0] == "/usr/bin/ssh" and "BatchMode=yes" in slurm.remote
    assert slurm.remote[-1] == "{node}"
    assert slurm.guard == ("/usr/bin/suspendguard",)
    assert slurm.exclude_file == "/var/lib/slurm/suspendguard-exclude.conf"
    assert slurm.power_off == () and slurm.power_on == ()


@pytest.mark.parametrize(("body", "said"), [
    ('exclude_file = "relative.conf"', '[slurm] exclude_file (line 2): expected an absolute path'),
    ("timeout_s = 0", "[slurm] timeout_s (line 2): expected a number > 0 and at most 86400, got 0"),
    ("resume_wait_s = 0", "[slurm] resume_wait_s (line 2): expected a number > 0"),
    ("guard = []", "[slurm] guard (line 2): expected a command"),
    ('remote = "ssh"', "[slurm] remote (line 2)"),
])
def test_a_bad_value_is_one_line_naming_file_and_key(tmp_path: Path, body: str, said: str) -> None:
    path = tmp_path / "config.toml"
    status, out, err = config_cli(path, f"[slurm]\n{body}\n")
    assert status == 2, err
    assert err.count("\n") == 1 and f"{path}: {said}" in err, err
    assert out == ""


@pytest.mark.parametrize("entry", ["login[1-2], gpu1", "login1 login2", "a\nb=c", "a#b",
                                   "", "a,", "node[1-2"])
def test_an_exclude_entry_that_is_not_one_hostlist_is_refused(tmp_path: Path, entry: str) -> None:
    # Written as it is into slurm.conf's SuspendExcNodes= line: a space or a newline there
    # is a parse error, and slurmctld exits at the guard's own scontrol reconfigure.
    path = tmp_path / "config.toml"
    status, out, err = config_cli(path, f"[slurm]\nexclude = [{json.dumps(entry)}]\n")
    assert (status, out) == (2, ""), err
    from suspendguard.system.terminal import safe
    assert err == (f"suspendguard: {path}: [slurm] exclude (line 2): expected one Slurm "
                   "hostlist expression per entry (names of letters, digits, . _ -, ranges such "
                   f"as node[01-04,07], joined by commas; no spaces), got {safe(entry)!r}\n")


def test_exclude_takes_hostlist_expressions(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    status, out, err = config_cli(
        path, '[slurm]\nexclude = ["login[1-2],gpu01", "rack4-n[001-016,020]", "ctl.local", '
        '"nid[10-20]:4,nid[80-90]:2"]\n')
    assert status == 0, err
    assert ('exclude = ["login[1-2],gpu01", "rack4-n[001-016,020]", "ctl.local", '
            '"nid[10-20]:4,nid[80-90]:2"]') in out


def test_no_exclusion_file_is_allowed_for_slurm_23(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    status, out, err = config_cli(path, '[slurm]\nexclude_file = ""\n')
    assert status == 0, err
    assert 'exclude_file = ""' in out


@pytest.mark.parametrize("verb", ["suspend", "resume"])
def test_a_failing_scontrol_is_one_line_and_exit_3(tmp_path: Path, verb: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[slurm]\nscontrol = "/usr/bin/false"\nexclude_file = ""\n')
    with standing_in(tmp_path, monkeypatch) as journal:
        status, out, err = cli("--config", str(path), "slurm", verb, "node[1-2]")
        said = entries(journal)
    line = f"slurm {verb}: scontrol show hostnames node[1-2]: /usr/bin/false: exit status 1"
    assert status == 3 and out == "", err
    assert err == f"suspendguard: {line}\n", err  # once, though the journal has it too
    assert [(e["MESSAGE"], e["PRIORITY"]) for e in said] == [(line, "3")]


IGNORED = "Slurm would ignore the whole SuspendExcNodes line, the nodes the guard holds with it"


@pytest.mark.parametrize(("entry", "why"), [
    ("gpu[1-2]:0", "expected each count from 1 to the number of names in its set (2 in gpu[1-2])"),
    ("gpu[1-2]:4", "expected each count from 1 to the number of names in its set (2 in gpu[1-2])"),
    ("n:99999999999999999999", "expected each count from 1 to the number of names in its set "
     "(1 in n)"),
    # A count is for every name since the count before it; a name repeated counts once.
    ("a,n[1-4]:6", "expected each count from 1 to the number of names in its set (5 in a,n[1-4])"),
    ("x:1,n[1-2],n2:3", "expected each count from 1 to the number of names in its set (2 in "
     "n[1-2],n2)"),
    ("n[3-1]", "expected each bracketed range as low-high, low no more than high and at most "
     "65536 hosts, got 'n[3-1]' (the range '3-1')"),
    ("n[0-65536]:1", "expected each bracketed range as low-high, low no more than high and at "
     "most 65536 hosts, got 'n[0-65536]:1' (the range '0-65536')"),
    # Slurm's hostlist reads no text after a name's last bracket ("Invalid hostlist").
    ("n[1-2].ib", "expected each name with a bracketed range to end with one (Slurm 22.05 "
     "reads no text after its last: n[1-2].ib[1], not n[1-2].ib), got 'n[1-2].ib' (the name "
     "'n[1-2].ib')"),
])
def test_an_exclude_entry_slurm_would_ignore_the_line_for_is_refused(
        tmp_path: Path, entry: str, why: str) -> None:
    # Slurm 22.05 reads SuspendExcNodes whole: one count below 1 or above its set's size, or
    # one range it cannot read, and it ignores the line, the nodes the guard wrote into it
    # with it (power_save.c, _parse_exc_nodes): they would be powered down under their holder.
    path = tmp_path / "config.toml"
    status, out, err = config_cli(path, f"[slurm]\nexclude = [{json.dumps(entry)}]\n")
    assert (status, out) == (2, ""), err
    assert err.startswith(f"suspendguard: {path}: [slurm] exclude (line 2): {why}"), err
    assert err.endswith(f": {IGNORED}\n") and err.count("\n") == 1, err


def test_exclude_takes_counts_up_to_the_size_of_their_set(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    entries = ["nid[10-20]:11", "a,n[1-4]:5", "n[1-2,5]:3", "rack[1-2]n[01-02]:4", "n[1-]:1"]
    status, _, err = config_cli(path, f"[slurm]\nexclude = {json.dumps(entries)}\n")
    assert status == 0, err


"""Configuration: defaults, every kind of bad input, and the effective TOML."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from helpers.runners import cli, config_cli

from suspendguard.config import SCHEMA, Rule, build, commented_default, defaults, load, to_toml
from suspendguard.config.schema import RULE_FIELDS, RULE_HELP
from suspendguard.config.spec import DAY_S, Bounds
from suspendguard.config.validate import shown
from suspendguard.errors import ConfigError
from suspendguard.system.deadline import ANSWER_MARGIN_S

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def test_defaults_match_the_issue() -> None:
    c = defaults()
    assert c.devices.families == ("ascend", "nvidia")
    assert c.drain.signal == "SIGINT" and c.drain.timeout_s == 30
    assert c.state.dir == "/var/lib/suspendguard"
    assert c.policy.protect == () and c.policy.ignore == ()


def test_effective_config_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[drain]\ntimeout_s = 12\nescalate = ["SIGTERM:10", "kill:5"]\n'
                    '[[policy.protect]]\ncomm = "trainer"\ncmdline = "--epochs \\\\d+"\n'
                    '[[policy.ignore]]\nuid = 997\nexe = "/usr/bin/x"\n')
    cfg = load(str(path))
    text = to_toml(cfg)
    again = build(tomllib.loads(text))
    assert again.drain == cfg.drain
    assert again.policy == cfg.policy
    assert [s.signal for s in cfg.drain.escalate] == ["SIGTERM", "SIGKILL"]


def test_effective_config_round_trips_characters_above_the_bmp() -> None:
    # Unprintable code points are escaped; above U+FFFF that takes TOML's \UXXXXXXXX.
    cmdline = "x\U000e0001y\u0085z\U0010ffff"
    cfg = build({"policy": {"protect": [{"cmdline": cmdline}]}})
    again = build(tomllib.loads(to_toml(cfg)))
    assert again.policy == cfg.policy
    assert again.policy.protect[0].cmdline == cmdline


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[drain\ntimeout_s = 1", "TOML syntax error"),
        ("[drain]\ntimeout = 1\n", "[drain] timeout (line 2): unknown key"),
        ("[drian]\n", "unknown section [drian]"),
        ('[drain]\ntimeout_s = "30"\n', "[drain] timeout_s (line 2): expected a number"),
        ("[drain]\ntimeout_s = -1\n", "expected a number > 0 and at most 86400, got -1"),
        # TOML's nan passes every comparison's bound: a nan busy_threshold reads
        # every device idle, a nan deadline_s or wait checks nothing.
        ("[idle]\nbusy_threshold = nan\n",
         "[idle] busy_threshold (line 2): expected a number from 0 to 100, got nan"),
        ("[drain]\ndeadline_s = nan\n", "[drain] deadline_s (line 2): expected a number > 0"),
        ("[drain]\ndeadline_s = inf\n", "[drain] deadline_s (line 2): expected a number > 0"),
        ('[drain]\nescalate = ["SIGTERM:nan"]\n', 'expected steps like "SIGTERM:10"'),
        ("[[policy.drain]]\nuid = 0\ntimeout_s = nan\n", "entry 1: timeout_s must be a number > 0"),
        ('[drain]\nsignal = "SIGFOO"\n', '[drain] signal (line 2): expected a signal name'),
        ('[drain]\non_sigint_ignored = "kill"\n', 'expected one of "veto", "escalate"'),
        ('[drain]\nescalate = ["SIGTERM"]\n', 'expected steps like "SIGTERM:10"'),
        # A stop signal ends nobody: the holder would stay stopped, its node held.
        ('[drain]\nsignal = "SIGSTOP"\n', "[drain] signal (line 2): expected a signal that ends "
         "a process, such as \"SIGINT\" or \"SIGTERM\", got 'SIGSTOP'"),
        ('[drain]\nsignal = "tstp"\n', "got 'SIGTSTP' (it stops the holder"),
        ('[drain]\nescalate = ["SIGTERM:1", "SIGSTOP:1"]\n',
         "[drain] escalate (line 2): expected a signal that ends a process"),
        # A signal ignored by default ends no holder without a handler: the drain would wait
        # its whole timeout and veto, while check foresaw the holder end.
        ('[drain]\nsignal = "SIGCHLD"\n', "[drain] signal (line 2): expected a signal that ends "
         "a process, such as \"SIGINT\" or \"SIGTERM\", got 'SIGCHLD' (its default action is to "
         "ignore it: a holder without a handler would not exit)"),
        ('[drain]\nsignal = "cld"\n', "got 'SIGCHLD' (its default action is to ignore it"),
        ('[drain]\nsignal = "cont"\n', "got 'SIGCONT' (its default action is to ignore it"),
        ('[drain]\nsignal = "SIGURG"\n', "got 'SIGURG' (its default action is to ignore it"),
        ('[drain]\nescalate = ["SIGTERM:1", "winch:1"]\n', "[drain] escalate (line 2): expected "
         "a signal that ends a process, such as \"SIGINT\" or \"SIGTERM\", got 'SIGWINCH' (its"),
        ('[devices]\nnodes = ["/dev/npu[0-9"]\n', "unclosed '['"),
        ('[devices]\nnodes = ["npu0"]\n', "expected an absolute path glob"),
        ('[devices]\nfamilies = ["amd"]\n',
         '[devices] families (line 2): expected a list of "ascend", "nvidia"'),
        ('[[policy.protect]]\ncmdline = "(unclosed"\n', "cmdline must be a valid regular expression"),
        ('[[policy.ignore]]\nname = "x"\n', "unknown field 'name'"),
        ('[[policy.ignore]]\nuid = "1000"\n', "entry 1: uid must be an integer from 0 to 4294967295"),
        ('[[policy.ignore]]\nuid = -1\n', "entry 1: uid must be an integer from 0"),
        ('[[policy.protect]]\nuid = true\n', "entry 1: uid must be an integer from 0"),
        # An entry's fault is said as it is, never as "expected entry ...".
        ('[[drain.launchers]]\ncmdline = "x"\nstop = "pause"\n',
         "[drain] launchers (line 1): entry 1: stop must be one of \"forward\", \"hold\", "
         "\"ranks\", got 'pause'"),
        ('[[policy.drain]]\nuid = 0\ntimeout_s = 5\n[[policy.drain]]\nuid = 1\n',
         "[policy] drain (line 4): entry 2: needs timeout_s, the wait for the holders it "
         "matches, as in { uid = 1000, timeout_s = 90 }"),
        ('[policy]\ndrain = [3]\n',
         "[policy] drain (line 2): entry 1: must be a table such as { uid = 1000, timeout_s = 90 }"),
        # A drain rule's fields are a match's and its wait: timeout_s is named among them.
        ('[[policy.drain]]\ncomm = "python"\ntimeout_s = 60\nsignal = "SIGTERM"\n',
         "entry 1: unknown field 'signal'; expected one of comm, exe, cmdline, user, uid, unit, "
         "timeout_s"),
        ("[[policy.ignore]]\n", "[policy] ignore (line 1): entry 1: needs at least one of comm"),
        ('[state]\ndir = "relative"\n', "[state] dir (line 2): expected an absolute path"),
        ("[idle]\nsamples = 0\n", "[idle] samples (line 2): expected an integer from 1 to 1000"),
        ("[drain]\ntimeout_s = 30\ndeadline_s = 20\n",
         "[drain] deadline_s (line 3): expected at least 46 ([drain] timeout_s + [idle] settle_s"),
        ("[drain]\ntimeout_s = 3\ndeadline_s = 10\n",
         "expected at least 19 ([drain] timeout_s + [idle] settle_s and twice command_timeout_s"),
        ('[drain]\ntimeout_s = 3\ndeadline_s = 10\nescalate = ["SIGTERM:6"]\n[idle]\nbackends = []\n',
         "expected at least 11 ([drain] timeout_s + the [drain] escalate waits + 2 s to answer)"),
        # deadline_s cannot be raised past a day: the advice is the one that can be followed
        ('[[policy.drain]]\ncomm = "python"\ntimeout_s = 86400\n',
         "expected at least 86416 (the longest [[policy.drain]] timeout_s + [idle] settle_s and "),
        ('[[policy.drain]]\ncomm = "python"\ntimeout_s = 86400\n',
         ", got 100: lower those parts (deadline_s is at most 86400)"),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.toml"
    code, out, err = config_cli(path, text)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert str(path) in err
    assert expected in err
    assert "Traceback" not in err


def refused_in_one_line(path: Path, text: str) -> str:
    """``config`` of ``text`` written to ``path``: refused, exit 2, in one line that starts
    with the file's path; that line."""
    code, out, err = config_cli(path, text)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith(f"suspendguard: {path}: "), err
    return err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Regular expressions that fail with OverflowError or RecursionError, not re.error.
        ('[[policy.protect]]\ncmdline = "a{4294967296}"\n',
         "[policy] protect (line 1): entry 1: cmdline must be a valid regular expression"),
        ('[[policy.drain]]\nuid = 0\ntimeout_s = 5\ncmdline = "' + "(" * 5000 + ")" * 5000
         + '"\n', "[policy] drain (line 1): entry 1: cmdline must be a valid regular expression"),
        ('[[drain.launchers]]\ncmdline = "a{4294967296}"\nstop = "hold"\n',
         "[drain] launchers (line 1): entry 1: cmdline must be a valid regular expression"),
        # A NUL reaches os calls (realpath, lstat) as a ValueError.
        ('[idle]\nnpu_smi = "/usr/bin/np\\u0000u"\n',
         "[idle] npu_smi (line 2): expected a string without a NUL character"),
        ('[state]\ndir = "/var/x\\u0000y"\n',
         "[state] dir (line 2): expected a string without a NUL character"),
        ('[devices]\nnodes = ["/dev/npu\\u0000*"]\n',
         "[devices] nodes (line 2): expected a string without a NUL character"),
        ('[devices]\nfamilies = ["ascend\\u0000"]\n',
         "[devices] families (line 2): expected a string without a NUL character"),
        ('[logs]\npaths = ["/var/log/x\\u0000/*.log"]\n',
         "[logs] paths (line 2): expected a string without a NUL character"),
    ],
)
def test_nul_and_regex_limits_are_one_line_exit_2(tmp_path: Path, text: str,
                                                  expected: str) -> None:
    err = refused_in_one_line(tmp_path / "bad.toml", text)
    assert expected in err, err


def test_a_nul_in_state_dir_is_a_config_error_for_any_user() -> None:
    with pytest.raises(ConfigError, match=r"\[state\] dir: expected a string without a NUL"):
        build({"state": {"dir": "/var/x\0y"}})


def test_a_byte_order_mark_is_named(tmp_path: Path) -> None:
    # A Windows editor's BOM: tomllib says only "Invalid statement (at line 1, column 1)".
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf[drain]\ntimeout_s = 5\n")
    code, out, err = cli("--config", str(path), "config")
    assert (code, out) == (2, "")
    assert err == (f"suspendguard: {path}: starts with a byte-order mark (BOM), which TOML does "
                   "not allow: save it as UTF-8 without one\n")


def test_commented_default_says_who_can_forge_each_match_kind() -> None:
    text = commented_default()
    for kind in RULE_FIELDS:
        assert f"#   {kind}: {RULE_HELP[kind]}" in text
    assert "#   comm: process name (/proc/PID/comm), exact: any user can set it" in text
    assert "# A protect rule on comm or cmdline alone lets any user veto every\n" \
        "# suspend (name a process so, open the device); an ignore rule on them\n" \
        "# alone lets any user's job run on through it: add uid, user, unit or exe." in text
    assert build(tomllib.loads(text.replace("# protect = [", "protect = ["))).policy.protect == (
        Rule(exe="/usr/bin/example", uid=1000),)


def test_drain_wait_that_fits_the_deadline_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    # No idle backend: nothing is reserved for an idle check, 3 + 2 s to answer fit in 5.
    code, out, err = config_cli(path, "[drain]\ntimeout_s = 3\ndeadline_s = 5\n[idle]\nbackends = []\n")
    assert code == 0, err
    assert "deadline_s = 5" in out


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    code, _, err = cli("config", "--config", str(tmp_path / "nope.toml"))
    assert code == 2 and "configuration file not found" in err


def test_env_var_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[drain]\ntimeout_s = 7\n")
    code, out, _ = cli("config", environ={"SUSPENDGUARD_CONFIG": str(path)})
    assert code == 0 and "timeout_s = 7" in out
    # --config wins over the environment
    other = tmp_path / "d.toml"
    other.write_text("[drain]\ntimeout_s = 9\n")
    code, out, _ = cli("--config", str(other), "config",
                           environ={"SUSPENDGUARD_CONFIG": str(path)})
    assert "timeout_s = 9" in out


def test_default_path_absent_means_defaults() -> None:
    cfg = load(None, {})
    assert cfg.loaded is False or Path("/etc/suspendguard/config.toml").exists()


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe[drain]")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load(str(path))


def test_readme_documents_every_key() -> None:
    readme = (REPO / "docs" / "configuration.md").read_text()
    for section, specs in SCHEMA.items():
        for key in specs:
            assert f"`[{section}] {key}`" in readme, f"docs/configuration.md lacks [{section}] {key}"


def test_policy_drain_rules_and_launchers_are_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    code, out, err = config_cli(path, (
        '[idle]\nbackends = []\n[drain]\ndeadline_s = 60\n'
        '[[drain.launchers]]\nexe = "/opt/lab/bin/launch"\nstop = "hold"\n'
        '[[policy.drain]]\nuid = 1000\nexe = "/usr/bin/python3*"\ntimeout_s = 50\n'))
    assert code == 0, err
    assert 'drain = [{ exe = "/usr/bin/python3*", uid = 1000, timeout_s = 50.0 }]' in out
    assert 'launchers = [{ exe = "/opt/lab/bin/launch", stop = "hold" }]' in out
    # A rule's wait must fit the deadline as [drain] timeout_s must.
    code, _out, err = config_cli(path, '[idle]\nbackends = []\n[drain]\ndeadline_s = 30\n'
                                    '[[policy.drain]]\nuid = 1000\ntimeout_s = 50\n')
    assert code == 2 and "the longest [[policy.drain]] timeout_s" in err, err
    code, _out, err = config_cli(path, '[[drain.launchers]]\nexe = "/opt/x"\nstop = "sigkill"\n')
    assert code == 2 and '[drain] launchers' in err, err
    assert 'entry 1: stop must be one of "forward", "hold"' in err, err
    code, _out, err = config_cli(path, '[[policy.drain]]\nuid = 1000\n')
    assert code == 2 and "[policy] drain" in err and "timeout_s" in err, err


# Every number of the schema, by family: each has its range (config/spec.py).
NUMBERS = {(section, key): spec.bounds for section, specs in SCHEMA.items()
           for key, spec in specs.items() if spec.bounds is not None}
FAMILIES = {
    "timeout": [k for k, b in NUMBERS.items() if b.open_low],
    "wait": [k for k, b in NUMBERS.items() if not b.open_low and b.high == DAY_S],
    "count or size": [k for k, b in NUMBERS.items() if b.high not in (DAY_S, 100) or k[1] == "rounds"],
    "percent": [("idle", "busy_threshold")],
}


def _out_of_range(bounds: Bounds) -> list[str]:
    """TOML values outside ``bounds``: nan, inf, under the low end, over the high one."""
    over = bounds.high * 10 if bounds.high * 10 < 2**63 else bounds.high + 1
    return ["nan", "inf", "-inf", "-1", "1e308", "1" + "0" * 400, repr(over),
            *(["0", "-0.0"] if bounds.open_low else [])]


def test_every_number_is_in_one_family() -> None:
    assert sorted(k for keys in FAMILIES.values() for k in keys) == sorted(NUMBERS)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_number_out_of_its_range_is_one_line_exit_2(tmp_path: Path, family: str) -> None:
    path = tmp_path / "bad.toml"
    for section, key in FAMILIES[family]:
        bounds = NUMBERS[(section, key)]
        for value in _out_of_range(bounds):
            code, out, err = config_cli(path, f"[{section}]\n{key} = {value}\n")
            assert code == 2 and out == "", (key, value, err)
            assert err.count("\n") == 1 and len(err) < 200, err
            assert err.startswith(f"suspendguard: {path}: [{section}] {key} (line 2): expected ")
            assert bounds.words() in err, err


@pytest.mark.parametrize("key", sorted(NUMBERS))
def test_a_number_at_the_top_of_its_range_is_accepted(key: tuple[str, str]) -> None:
    section, name = key
    high = NUMBERS[key].high
    # The drain wait, plus the time to answer, must fit in the deadline.
    value = high - ANSWER_MARGIN_S if key == ("drain", "timeout_s") else high
    data = {"drain": {"deadline_s": DAY_S}, "idle": {"backends": []}}
    data.setdefault(section, {})[name] = value
    assert getattr(getattr(build(data), section), name) == value


@pytest.mark.parametrize(("text", "expected"), [
    ('[drain]\nescalate = ["SIGTERM:1e308"]\n', "each wait from 0 to 86400 s, got 'SIGTERM:1e308'"),
    ('[drain]\nescalate = ["SIGTERM:86401"]\n', "each wait from 0 to 86400 s"),
    ('[drain]\nescalate = ["SIGTERM:-1"]\n', "each wait from 0 to 86400 s"),
    ("[[policy.drain]]\nuid = 0\ntimeout_s = 1e308\n",
     "entry 1: timeout_s must be a number > 0 and at most 86400, got 1e+308"),
    ("[[policy.drain]]\nuid = 0\ntimeout_s = 1" + "0" * 400 + "\n",
     "entry 1: timeout_s must be a number > 0 and at most 86400, got 100000000000... (401 digits)"),
    ("[[policy.drain]]\nuid = 0\ntimeout_s = inf\n", "got inf"),
])
def test_a_wait_inside_a_list_has_the_same_range(tmp_path: Path, text: str, expected: str) -> None:
    err = refused_in_one_line(tmp_path / "bad.toml", text)
    assert expected in err, err


HEX_4000 = "0x" + "f" * 4000  # 16000 bits: 4817 digits, which Python turns into no text


@pytest.mark.parametrize(("text", "expected"), [
    # Python reads no decimal integer of over 4300 digits (tomllib raises ValueError).
    ("[drain]\nrounds = 1" + "0" * 5000 + "\n",
     "an integer of 5001 digits (line 2): too long to read"),
    ("[idle]\n\nsamples = 1_" + "0" * 5000 + "\n", "an integer of 5001 digits (line 3)"),
    # A hexadecimal one is read, whatever its length, and its error line sizes it.
    (f"[idle]\nsamples = {HEX_4000}\n",
     "[idle] samples (line 2): expected an integer from 1 to 1000, got an integer of about "
     "4817 digits"),
    (f"[[policy.drain]]\nuid = 0\ntimeout_s = {HEX_4000}\n",
     "entry 1: timeout_s must be a number > 0 and at most 86400, got an integer of about "
     "4817 digits"),
])
def test_an_integer_too_long_for_text_is_one_line_exit_2(tmp_path: Path, text: str,
                                                         expected: str) -> None:
    path = tmp_path / "bad.toml"
    err = refused_in_one_line(path, text)
    assert len(err) < 250 and expected in err, err
    with pytest.raises(ConfigError):
        load(str(path))


def test_an_integer_too_long_for_text_is_sized_from_its_bits() -> None:
    assert shown(10**700) == "an integer of about 701 digits"
    assert shown(-(1 << 20000)) == "a negative integer of about 6021 digits"
    assert shown(10**30) == "100000000000... (31 digits)"  # shown whole up to its 12th digit


@pytest.mark.parametrize(("text", "expected"), [
    ('[drain]\n"x\\u001b[31mRED\\nsecond line" = 1\n',
     "[drain] x\\e[31mRED\\nsecond line: unknown key; expected one of signal"),
    ('["sec\\u001b[2J\\nline2"]\n', "unknown section [sec\\e[2J\\nline2]; expected one of"),
    ('[drain]\n"\\u009b2J\\r" = 1\n', "[drain] \\x9b2J\\r: unknown key"),
])
def test_an_unknown_name_with_control_characters_is_shown_escaped(
        tmp_path: Path, text: str, expected: str) -> None:
    # A quoted TOML key may hold a newline or ESC: the error line must stay one line, and
    # must not move the terminal's cursor or forge a second line in the journal.
    path = tmp_path / "bad.toml"
    code, out, err = config_cli(path, text)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert not any(c in err[:-1] for c in "\x1b\r\n\x9b"), err
    assert expected in err, err


@pytest.mark.parametrize("data", [
    {},
    # Each wait as written, to the last digit a float keeps.
    {"drain": {"escalate": ["SIGTERM:10.123456789", "kill:0.1", "SIGHUP:600.5",
                            "SIGTERM:1e-07", "SIGTERM:0", "SIGTERM:3.3333333333333335"]}},
    {"drain": {"timeout_s": 12.000001, "signal": "term", "rounds": 3},
     "idle": {"busy_threshold": 0.123456789, "settle_s": 1.0000001},
     "policy": {"protect": [{"comm": "trainer", "uid": 1000}],
                "drain": [{"exe": "/usr/bin/x", "timeout_s": 90.0000001}]}},
])
def test_the_effective_config_loads_back_to_the_same_config(data: dict[str, Any]) -> None:
    data = {**data, "drain": {"deadline_s": DAY_S, **data.get("drain", {})}}
    config = build(data)
    assert build(tomllib.loads(to_toml(config))) == config

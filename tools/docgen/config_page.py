"""suspendguard.toml(5) and the README's table of keys, from the config schema.

Each key's default is shown exactly as the commented default file that
install writes has it (``commented_default()``), and its meaning is the
schema's help text, which that file carries as its comment: the file, the
page and the README say the same.
"""

from __future__ import annotations

import re

from docgen import roff
from suspendguard import __version__
from suspendguard.config import DEFAULT_PATH, ENV_VAR, SCHEMA, commented_default
from suspendguard.config.schema import RULE_FIELDS, RULE_HELP
from suspendguard.config.spec import Kind, Spec

KINDS: dict[Kind, str] = {
    "str": "string",
    "path": "absolute path",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "list of strings",
    "globs": "list of absolute globs",
    "choice": "one of {choices}",
    "choices": "list of {choices}",
    "signal": "signal name",
    "escalate": 'list of "SIGNAL:SECONDS"',
    "rules": "array of rule tables",
    "launchers": "array of launcher tables",
    "drainrules": "array of rule tables with timeout_s",
}

EXAMPLE = """\
[devices]
families = ["ascend"]

[drain]
timeout_s = 45
escalate = ["SIGTERM:10"]          # opt-in; default: never beyond SIGINT

[[policy.protect]]                 # never signalled; no suspend while it runs
unit = "inference-server.service"
user = "inference"                 # any user can name a user unit so: the user holds

[[policy.ignore]]                  # not counted, not signalled
user = "prometheus"                # a name alone would let any job pass as the exporter
exe = "/usr/local/bin/my-exporter\""""

README_START = "<!-- config-keys:start (generated from the config schema: tools/gen-docs) -->"
README_END = "<!-- config-keys:end -->"


def kind_words(spec: Spec, quote: str = "") -> str:
    """The key's type, and for a number its valid range, as the error line says it."""
    words = KINDS[spec.kind].format(choices=", ".join(f"{quote}{c}{quote}" for c in spec.choices))
    return f"{words} {spec.bounds.words()}" if spec.bounds is not None else words


def defaults_as_written() -> dict[tuple[str, str], str]:
    """Each key's default as the commented default file writes it (rules: none, ``[]``)."""
    found: dict[tuple[str, str], str] = {}
    section = ""
    for line in commented_default().splitlines():
        if m := re.fullmatch(r"\[(\w+)\]", line):
            section = m.group(1)
        elif (m := re.fullmatch(r"# (\w+) = (.*)", line)) and m.group(1) in SCHEMA.get(section, {}):
            found[(section, m.group(1))] = m.group(2)
    for section, specs in SCHEMA.items():
        for key, spec in specs.items():
            if spec.kind in ("rules", "launchers", "drainrules"):
                found[(section, key)] = "[]"
            elif (section, key) not in found:
                raise ValueError(f"commented_default() has no line for [{section}] {key}")
    return found


def config_page(date: str) -> str:
    defaults = defaults_as_written()
    out = [
        f'.TH SUSPENDGUARD.TOML 5 "{roff.text(date)}" "suspendguard {__version__}" "File Formats"',
        ".SH NAME",
        "suspendguard.toml \\- configuration of suspendguard(8)",
        ".SH SYNOPSIS",
        roff.italic(DEFAULT_PATH),
        ".SH DESCRIPTION",
        roff.paragraphs(
            f"""The configuration of suspendguard(8), in TOML. The guard reads the
            file named by `--config PATH`, else by `${ENV_VAR}`, else `{DEFAULT_PATH}`;
            no file means the built-in defaults. Every key is optional; a key
            left out has the default shown below.""",
            """`suspendguard install` and the packages write the file with every
            default commented out, each under its meaning as given here.
            `suspendguard config` prints the effective configuration.""",
            """A bad file (unknown section or key, wrong type, a value out of range)
            stops every command with one line naming the file, the key and its
            line, and what was expected; exit status 2.""",
            """After changing `[drain] deadline_s`, `[state] dir` or the file's
            location, run `suspendguard install` again: it writes them into the
            unit and the hook.""",
        ),
    ]
    for section, specs in SCHEMA.items():
        out.append(f'.SH "[{section.upper()}] SECTION"')
        for key, spec in specs.items():
            tag = f"{roff.bold(key)} = {roff.text(defaults[(section, key)])}"
            out.append(roff.tagged(tag, f"{spec.doc} Type: {kind_words(spec)}."))
    out.append('.SH "POLICY RULES"')
    out.append(roff.paragraphs(
        """`[[policy.protect]]` and `[[policy.ignore]]` are arrays of tables; each
        table is one rule, and a rule matches a holder when every field it gives
        matches:"""))
    missing = set(RULE_FIELDS) ^ set(RULE_HELP)
    if missing:
        raise ValueError(f"RULE_HELP and the schema's rule fields differ: {sorted(missing)}")
    out.extend(roff.tagged(roff.bold(name), RULE_HELP[name]) for name in RULE_FIELDS)
    out.append(".PP")
    out.append(roff.paragraphs(
        """A process sets its own name and command line: a rule on comm or cmdline
        alone matches whatever any user chooses to run. A protect rule of that kind
        lets any user veto every suspend, an ignore rule lets any user's job run on
        through it; check warns of each one. Give uid or user (and exe or unit) for
        a rule that holds."""))
    out.append(".SH EXAMPLE")
    out.extend([".PP", ".nf", ".RS 4", roff.text(EXAMPLE), ".RE", ".fi"])
    out.append(".SH FILES")
    out.append(roff.tagged(roff.italic(DEFAULT_PATH), "The default location."))
    out.append('.SH "SEE ALSO"')
    out.append("suspendguard(8)")
    return "\n".join(out) + "\n"


def readme_keys_table() -> str:
    """The README's table of every key, between its markers."""
    defaults = defaults_as_written()
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for section, specs in SCHEMA.items():
        for key, spec in specs.items():
            rows.append(f"| `[{section}] {key}` | {kind_words(spec, '`')} | `{defaults[(section, key)]}` | "
                        f"{spec.doc} |")
    return "\n".join([README_START, *rows, README_END])


def with_keys_table(readme: str) -> str:
    """The README with its table of keys regenerated."""
    pattern = re.compile(re.escape(README_START) + r".*?" + re.escape(README_END), re.DOTALL)
    if len(pattern.findall(readme)) != 1:
        raise ValueError(f"docs/configuration.md: expected one block {README_START} ... {README_END}")
    return pattern.sub(lambda _m: readme_keys_table(), readme)

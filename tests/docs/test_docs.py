"""The man pages and shell completion: generated from build_parser() and the schema, and current.

The committed files (man/, completion/, the README's table of keys) must be
exactly what the generators give now, and must name every subcommand, every
option and every configuration key; the bash completion is run in a real
bash, the man pages are rendered by man(1) with its warnings on.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from docgen import GENERATED, KEYS_PAGE, generate
from docgen.__main__ import main as docs_main
from helpers import REPO

from suspendguard.cli import build_parser
from suspendguard.config import SCHEMA, commented_default
from suspendguard.config.render import FORGEABLE_NOTE, RULES_INTRO
from suspendguard.config.schema import RULE_FIELDS, RULE_HELP

MAN8 = REPO / "man" / "suspendguard.8"
MAN5 = REPO / "man" / "suspendguard.toml.5"
BASH = REPO / "completion" / "suspendguard"
ZSH = REPO / "completion" / "_suspendguard"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string but -h/--help (argparse's own, not documented per command)."""
    return [s for a in parser._actions if not isinstance(a, argparse._HelpAction)
            for s in a.option_strings]


def unescaped(roff: str) -> str:
    return roff.replace("\\-", "-").replace("\\e", "\\")


def test_generated_files_are_current() -> None:
    stale = [path for path, text in generate(REPO).items()
             if (REPO / path).read_text(encoding="utf-8") != text]
    assert stale == [], f"run tools/gen-docs: {stale} differ from what build_parser() gives now"


def test_check_mode_names_a_stale_file_and_writes_nothing(tmp_path: Path) -> None:
    for path in [*GENERATED, KEYS_PAGE, "debian/changelog"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, tmp_path / path)
    assert docs_main(["--check", str(tmp_path)]) == 0
    (tmp_path / "completion/_suspendguard").write_text("#compdef suspendguard\n")
    assert docs_main(["--check", str(tmp_path)]) == 1
    assert (tmp_path / "completion/_suspendguard").read_text() == "#compdef suspendguard\n"
    assert docs_main([str(tmp_path)]) == 0  # rewrites it
    assert (tmp_path / "completion/_suspendguard").read_text() == ZSH.read_text()


def test_man_page_has_a_section_per_subcommand_with_all_its_options() -> None:
    page = unescaped(MAN8.read_text())
    parts = re.split(r"^\.SH COMMAND .*'suspendguard ([\w-]+)'.*$", page, flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    assert set(sections) == set(subcommands())
    for name, sub in subcommands().items():
        for option in options(sub):
            assert re.search(rf"^\\fB{re.escape(option)}\\fR", sections[name], re.M), (name, option)
    top = parts[0] + page.split(".SH EXIT STATUS")[0].rsplit(".SH OPTIONS\n", 1)[-1]
    for option in options(build_parser()):
        assert f"\\fB{option}\\fR" in top, option
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "FILES", "SEE ALSO"):
        assert re.search(rf'^\.SH "?{heading}"?$', page, re.M), heading


def test_config_page_has_every_key_with_its_default_and_help() -> None:
    page = unescaped(MAN5.read_text())
    for section, specs in SCHEMA.items():
        body = page.split(f'.SH "[{section.upper()}] SECTION"\n', 1)[1].split("\n.SH ", 1)[0]
        for key, spec in specs.items():
            assert re.search(rf"^\\fB{key}\\fR = ", body, re.M), (section, key)
            assert " ".join(spec.doc.split()) in " ".join(body.split()), (section, key)


def test_installed_config_comments_are_the_pages_help_texts() -> None:
    text = commented_default()
    assert "README" not in text
    assert "man 5 suspendguard.toml" in text
    page = " ".join(unescaped(MAN5.read_text()).split())
    # The rules' match kinds, each with who can forge it, as the page gives them.
    kinds = [line[4:] for line in text.splitlines() if line.startswith("#   ")]
    assert kinds == [f"{k}: {RULE_HELP[k]}" for k in RULE_FIELDS]
    for kind, help_text in RULE_HELP.items():
        assert f"\\fB{kind}\\fR {help_text}" in page, kind
    comments = [line[2:] for line in text.splitlines()
                if line.startswith("# ") and not re.match(r"# \w+ = ", line)
                and not line.startswith("#   ") and line not in (RULES_INTRO, *FORGEABLE_NOTE)][3:]
    assert len(comments) == sum(len(s) for s in SCHEMA.values())
    for comment in comments:
        assert comment in page, comment


def test_bash_completion_names_every_subcommand_and_option() -> None:
    script = BASH.read_text()
    [names] = re.findall(r"^_shtab_suspendguard_subparsers=\((.*)\)$", script, re.M)
    assert names.split() == list(subcommands())
    for name, sub in subcommands().items():
        var = "_shtab_suspendguard_" + re.sub(r"\W", "_", name) + "_option_strings"
        [found] = re.findall(rf"^{var}=\((.*)\)$", script, re.M)
        assert set(options(sub)) <= set(found.split()), name


def test_zsh_completion_names_every_subcommand_and_option() -> None:
    script = ZSH.read_text()
    assert script.startswith("#compdef suspendguard\n")
    for name, sub in subcommands().items():
        assert re.search(rf"^\s+{re.escape(name)}:'", script, re.M), name
        var = "_shtab_suspendguard_" + re.sub(r"\W", "_", name) + "_options"
        block = script.split(f"\n{var}=(\n", 1)[1].split("\n)\n", 1)[0]
        for option in options(sub):
            # A repeatable option is written "*--unit[...]".
            assert re.search(rf'"\*?{re.escape(option)}\[|[{{,]{re.escape(option)}[,}}]', block), (
                name, option)


def complete(words: list[str], cwd: Path = REPO) -> list[str]:
    """What bash offers for the last word of ``words``, with the shipped script loaded."""
    script = (f"source {BASH}\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
              f"COMP_CWORD={len(words) - 1}\nCOMP_LINE='{' '.join(words)}'\nCOMP_POINT=${{#COMP_LINE}}\n"
              "_shtab_suspendguard\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=cwd,
                            capture_output=True, text=True, timeout=30, check=True)
    return result.stdout.split()


def test_bash_completes_subcommands_options_and_choices(tmp_path: Path) -> None:
    assert complete(["suspendguard", "st"]) == ["status"]
    assert set(complete(["suspendguard", ""])) >= set(subcommands())
    assert complete(["suspendguard", "check", "--d"]) == ["--dry-run"]
    assert complete(["suspendguard", "pre-sleep", "hy"]) == ["hybrid-sleep"]
    (tmp_path / "stage-here").mkdir()
    (tmp_path / "stage-file").write_text("")
    assert complete(["suspendguard", "install", "--root", "stage"], cwd=tmp_path) == ["stage-here"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_parses() -> None:
    subprocess.run(["zsh", "-n", str(ZSH)], check=True, timeout=30)


@pytest.mark.skipif(shutil.which("man") is None, reason="man (man-db) is not installed")
@pytest.mark.parametrize("page", [MAN8, MAN5], ids=lambda p: p.name)
def test_man_renders_the_page_without_warnings(page: Path) -> None:
    # lintian's own check (manpage-has-errors-from-man)
    result = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", str(page)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "LC_ALL": "C.UTF-8", "MANROFFSEQ": "", "MANWIDTH": "80"})
    assert result.returncode == 0 and result.stderr == "", result.stderr
    text = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "MANWIDTH": "200", "MAN_KEEP_FORMATTING": ""}).stdout
    assert "NAME" in text and "SEE ALSO" in text


def test_layer_table_names_every_module() -> None:
    """docs/development.md's layer table names each module in its folder's row."""
    rows = {}
    for line in (REPO / "docs" / "development.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            for folder in cells[0].replace("`", "").split():
                rows[folder.rstrip("/").removesuffix(".py")] = cells[1]
    package = REPO / "suspendguard"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if path.stem in ("__init__", "__main__") or len(rel.parts) == 1:
            continue
        folder = rel.parts[0]
        if folder not in rows:
            missing.append(f"{folder}/ (no row)")
        elif f"`{path.stem}`" not in rows[folder]:
            missing.append(str(rel))
    assert missing == [], f"docs/development.md's layer table does not name: {missing}"


def test_the_wheel_ships_the_pages_but_not_their_generators(tmp_path: Path) -> None:
    # Nothing at run time imports the generators: they stay in tools/. The
    # wheel is built for real, from a copy (a build writes build/ and
    # *.egg-info next to the sources).
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "__pycache__", "*.egg-info", ".*_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "--disable-pip-version-check", "-q", "-w", str(tmp_path / "dist"), str(src)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("suspendguard-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "suspendguard/cli.py" in names and "suspendguard/data/man/suspendguard.8" in names
    assert [n for n in names if "docgen" in n or n.startswith("suspendguard/docs/")] == []


def test_command_reference_has_each_command_with_its_exit_statuses() -> None:
    """docs/commands.md's reference table: a row per command, naming each status its --help declares."""
    from suspendguard.commands import COMMANDS
    text = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    table = text.split("## Command reference", 1)[1].split("Exit statuses, across commands", 1)[0]
    documented: dict[str, set[int]] = {}
    for line in table.splitlines():
        m = re.match(r"\| `suspendguard ([\w-]+)", line)
        if m:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            codes = {int(c) for c in re.findall(r"(?:^|, )(\d+)\b", cells[-1])}
            documented.setdefault(m.group(1), set()).update(codes)
    declared = {c.name: {code for code, _ in c.exits} for c in COMMANDS}
    assert documented == declared

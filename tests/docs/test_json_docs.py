"""docs/json-and-metrics.md against real output: the keys it documents are the keys the commands give.

The example of ``check --json`` is parsed (its comments taken out) and held
to a real ``check --json`` with a real holder; the table of ``status --json``
names each top-level key and, for each part that is an object, the keys of
that object, and is held to a real ``status --json``.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from helpers import REPO
from helpers.holders import Holders

from suspendguard.cli import main

DOC = REPO / "docs" / "json-and-metrics.md"


def run(*argv: str, environ: dict[str, str] | None = None) -> Any:
    out, err = io.StringIO(), io.StringIO()
    main(list(argv), out=out, err=err, environ=environ or {})
    return json.loads(out.getvalue())


def check_example() -> Any:
    text = DOC.read_text(encoding="utf-8")
    block = text.split("## JSON of `check`", 1)[1].split("```jsonc\n", 1)[1].split("```", 1)[0]
    return json.loads(re.sub(r"\s//.*$", "", block, flags=re.M))


def level_one_keys(text: str) -> set[str]:
    """The keys of the objects written in ``text`` (`{"a", "b": [...], "c" (why)}`), not those
    nested deeper; a quoted word after ":" or "|" is a value, not a key."""
    keys: set[str] = set()
    depth = 0
    for m in re.finditer(r'[{}\[\]]|"(\w+)"', text):
        token = m.group(0)
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
        elif depth == 1:
            before = text[:m.start()].rstrip()[-1:]
            after = text[m.end():].lstrip()[:1]
            if before in "{," and after in ",:}(":
                keys.add(m.group(1))
    return keys


def status_table() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## JSON of `status`", 1)[1].split("## Metrics", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) != 2:
            continue
        if cells[0] == "also":
            rows.update(dict.fromkeys(re.findall(r"`(\w+)`", cells[1]), ""))
        elif cells[0].startswith("`"):
            for name in re.findall(r"`([\w.]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def test_check_json_has_the_documented_keys(conf: Path, node: str, holders: Holders) -> None:
    holders.start(node)
    example = check_example()
    real = run("check", "--json", "--config", str(conf))
    assert set(real) == set(example)
    [holder] = real["holders"]
    [documented] = example["holders"]
    assert set(holder) == set(documented)
    for key in ("owner", "outcome"):
        assert set(holder[key]) == set(documented[key]), key
    assert set(holder["nodes"][0]) == set(documented["nodes"][0])
    assert set(real["devices"][0]) == set(example["devices"][0])


def test_status_json_has_the_documented_keys(conf: Path, no_bus: str) -> None:
    table = status_table()
    real = run("status", "--json", "--config", str(conf),
               environ={"DBUS_SYSTEM_BUS_ADDRESS": no_bus})
    assert set(real) == {name for name in table if "." not in name}
    for name, value in real.items():
        if not isinstance(value, dict):
            continue
        documented = level_one_keys(table[name]) | {
            n.split(".", 1)[1] for n in table if n.startswith(f"{name}.")}
        # A part that could not be had is {"available": false, "reason"} (no bus here).
        assert set(value) <= documented | {"available", "reason"}, name
        if value.get("available", True):
            assert documented <= set(value), name

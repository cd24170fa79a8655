"""``python -m docgen [--check] [REPO]``: write the generated files, or check them.

Run from a checkout (tools/gen-docs does). ``--check`` writes nothing and
exits 1 naming each file that differs from what the parser and the schema
give now.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from docgen import generate


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    parser.add_argument("repo", nargs="?", default=".", help="the checkout (default: .)")
    args = parser.parse_args(argv)
    repo = Path(args.repo)
    stale = []
    for path, text in generate(repo).items():
        target = repo / path
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if args.check and stale:
        print("out of date (run tools/gen-docs): " + " ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Read the JSON of `check --dry-run --json` for the CI smoke step.

    smoke_verdict.py REPORT PID ACTION VERDICT WANT_STATUS STATUS

Fails (exit 1, one line per problem) unless the holder PID is listed exactly
once, with ACTION, and the verdict is exactly VERDICT with exit status
WANT_STATUS. A run that merely did not crash proves nothing.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    path, pid, action, verdict, want_status, status = argv
    with open(path) as f:
        report = json.load(f)
    actions = [h["action"] for h in report["holders"] if h["pid"] == int(pid)]
    problems = []
    if actions != [action]:
        problems.append(f"holder {pid}: {actions or 'not found'}, not [{action!r}]")
    if (report["verdict"], status) != (verdict, want_status):
        problems.append(f"verdict {report['verdict']} (exit status {status}), "
                        f"not {verdict} ({want_status})")
    for problem in problems:
        print(f".ci/run: check --dry-run: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

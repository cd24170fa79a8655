"""``python3 -I -m suspendguard.notify.send ADDRESS TIMEOUT SUMMARY BODY``: one notification.

Run by the guard as the user whose session bus ``ADDRESS`` is (a root
connection to it is refused). BODY is plain text, escaped here for a server
that reads markup in it. Prints the server's id; exit status 1 and
the reason on stderr when it could not be shown.
"""

from __future__ import annotations

import sys

from suspendguard.model import Unavailable
from suspendguard.system.dbus.notifications import notify

APP_NAME = "suspendguard"


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python3 -m suspendguard.notify.send ADDRESS TIMEOUT SUMMARY BODY",
              file=sys.stderr)
        return 2
    address, timeout, summary, body = argv
    got = notify(address, APP_NAME, summary, body, float(timeout))
    if isinstance(got, Unavailable):
        print(got.reason, file=sys.stderr)
        return 1
    print(got)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

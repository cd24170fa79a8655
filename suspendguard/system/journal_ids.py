"""The MESSAGE_IDs of the guard's structured journal entries, in one place.

Each is a 128-bit id (32 lowercase hex digits, no dashes), made once and
never changed nor reused: operators filter on them (``journalctl
MESSAGE_ID=...``), and ``journalctl -x`` explains each through the catalog
(systemd/catalog/suspendguard.catalog, one entry per id here; the packages
install it to /usr/lib/systemd/catalog). docs/json-and-metrics.md
("Journal entries") lists them.
"""

from __future__ import annotations

# A real suspend refused: verdict veto or unknown (guard/render.py).
VETO = "a24a978d44724be5ac8bf54cd83473b9"
# A real suspend allowed after the guard drained the holders (guard/render.py).
ALLOW_AFTER_DRAIN = "2f345769dc164d58a57894403ca9b217"
# Jobs kept stopped after resume: a device stays unhealthy (commands/restore.py).
HELD_AFTER_RESUME = "6f1c1d8e3b1a4f5e9a0d2c7b8e4f1a20"
# A job the guard stopped that it could not start again (guard/restore.py).
RESTORE_FAILED = "b3fff687dc964ee484134370f5035730"

MESSAGE_IDS: dict[str, str] = {
    "veto": VETO,
    "allow-after-drain": ALLOW_AFTER_DRAIN,
    "held-after-resume": HELD_AFTER_RESUME,
    "restore-failed": RESTORE_FAILED,
}
# Where the packages put the catalog; journalctl --update-catalog reads it
# there (and from /usr/local/lib/systemd/catalog), never from /etc.
CATALOG_PATH = "/usr/lib/systemd/catalog/suspendguard.catalog"

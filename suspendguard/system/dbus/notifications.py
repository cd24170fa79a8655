"""A desktop notification: ``org.freedesktop.Notifications.Notify`` on a user's session bus.

The freedesktop notification spec's one call. It must be made by the user
whose bus it is: dbus-daemon refuses a connection from root to a user's
session bus (systemd issue 6249), so the guard runs suspendguard/notify/send.py as
the user, which calls this.
"""

from __future__ import annotations

from suspendguard.model import Unavailable
from suspendguard.system.dbus.bus import Session, converse, variant

NOTIFICATIONS_NAME = "org.freedesktop.Notifications"
NOTIFICATIONS_PATH = "/org/freedesktop/Notifications"
URGENCY_CRITICAL = 2  # the spec's "urgency" hint, a byte: 0 low, 1 normal, 2 critical


def session_bus_address(uid: int) -> str:
    """Where a user's session bus listens (dbus-user-session, a login's dbus-daemon)."""
    return f"unix:path=/run/user/{uid}/bus"


def notify(address: str, app_name: str, summary: str, body: str,
           timeout: float, urgency: int = URGENCY_CRITICAL) -> int | Unavailable:
    """Show a notification; the server's id for it, or why it could not be shown."""

    async def call(session: Session) -> int:
        reply = await session.call(
            NOTIFICATIONS_NAME, NOTIFICATIONS_PATH, NOTIFICATIONS_NAME, "Notify",
            "susssasa{sv}i",
            [app_name, 0, "", summary, body, [], {"urgency": variant("y", urgency)}, -1],
            expect="u")
        return int(reply.body[0])

    return converse("the notification server", timeout, call, address)

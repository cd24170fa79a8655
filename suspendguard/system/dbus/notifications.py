"""A desktop notification: ``org.freedesktop.Notifications.Notify`` on a user's session bus.

The freedesktop notification spec's one call. It must be made by the user
whose bus it is: dbus-daemon refuses a connection from root to a user's
session bus (systemd issue 6249), so the guard runs suspendguard/notify/send.py as
the user, which calls this.
"""

from __future__ import annotations

from suspendguard.model import Unavailable
from suspendguard.system.dbus.bus import Failure, Session, converse, variant

NOTIFICATIONS_NAME = "org.freedesktop.Notifications"
NOTIFICATIONS_PATH = "/org/freedesktop/Notifications"
URGENCY_CRITICAL = 2  # the spec's "urgency" hint, a byte: 0 low, 1 normal, 2 critical


def session_bus_address(uid: int) -> str:
    """Where a user's session bus listens (dbus-user-session, a login's dbus-daemon)."""
    return f"unix:path=/run/user/{uid}/bus"


def escape(text: str) -> str:
    """``text`` as the spec's body markup reads it: & < > as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def notify(address: str, app_name: str, summary: str, body: str,
           timeout: float, urgency: int = URGENCY_CRITICAL) -> int | Unavailable:
    """Show a notification; the server's id for it, or why it could not be shown.

    ``body`` is plain text: escaped for a server that reads markup in it (its
    ``body-markup`` capability, or one that cannot say), sent as it is to one that
    shows it as written, where entities would show through.
    """

    async def call(session: Session) -> int:
        try:
            caps = await session.call(NOTIFICATIONS_NAME, NOTIFICATIONS_PATH,
                                      NOTIFICATIONS_NAME, "GetCapabilities", expect="as")
            markup = "body-markup" in caps.body[0]
        except Failure:
            markup = True  # cannot tell: no markup of a process name's may be read
        text = escape(body) if markup else body
        reply = await session.call(
            NOTIFICATIONS_NAME, NOTIFICATIONS_PATH, NOTIFICATIONS_NAME, "Notify",
            "susssasa{sv}i",
            [app_name, 0, "", summary, text, [], {"urgency": variant("y", urgency)}, -1],
            expect="u")
        return int(reply.body[0])

    return converse("the notification server", timeout, call, address, "session bus")

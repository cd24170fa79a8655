"""A fake notification server (org.freedesktop.Notifications) on a bus, as a separate process.

    python fake_notifications.py --address ADDRESS --log FILE [--silent] [--caps CAP,...]

Each Notify call is one JSON line in FILE (app_name, summary, body, hints with
their values, expire_timeout, and the caller's uid), and is answered with an
id. --silent owns the name but never answers (a server that hangs). --caps: what
GetCapabilities answers (default "body,body-markup", as most servers; "body": one
that shows the body as written, "none": one without the method). Prints
"READY" once the name is owned; exits on SIGTERM or when the bus goes away.
No `from __future__ import annotations`: dbus-next reads the D-Bus signatures
from the annotations.
"""

# D-Bus signatures in annotations are not Python names.
# ruff: noqa: F821, F722

import argparse
import asyncio
import contextlib
import json
import signal
import sys

from dbus_next import DBusError, MessageType, NameFlag, RequestNameReply, Variant
from dbus_next.aio import MessageBus
from dbus_next.service import ServiceInterface, method

NAME = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"


class Notifications(ServiceInterface):
    def __init__(self, log: str, caps: list[str]) -> None:
        super().__init__(NAME)
        self.log = log
        self.caps = caps
        self.next_id = 0

    @method()
    def Notify(self, app_name: "s", replaces_id: "u", app_icon: "s", summary: "s", body: "s",
               actions: "as", hints: "a{sv}", expire_timeout: "i") -> "u":
        self.next_id += 1
        plain = {k: v.value if isinstance(v, Variant) else v for k, v in hints.items()}
        with open(self.log, "a") as f:
            f.write(json.dumps({"app_name": app_name, "summary": summary, "body": body,
                                "hints": plain, "expire_timeout": expire_timeout,
                                "actions": actions}) + "\n")
        return self.next_id

    @method()
    def GetCapabilities(self) -> "as":
        return self.caps


class WithoutCapabilities(Notifications):
    """An old server without GetCapabilities: the call is an UnknownMethod error."""

    @method()
    def GetCapabilities(self) -> "as":
        raise DBusError("org.freedesktop.DBus.Error.UnknownMethod", "no such method")


async def serve(address: str, log: str, silent: bool, caps: str) -> None:
    bus = await MessageBus(bus_address=address).connect()
    if silent:
        bus.add_message_handler(lambda msg: msg.message_type == MessageType.METHOD_CALL)
    else:
        kind = WithoutCapabilities if caps == "none" else Notifications
        bus.export(PATH, kind(log, [c for c in caps.split(",") if c and caps != "none"]))
    reply = await bus.request_name(NAME, NameFlag.DO_NOT_QUEUE)
    if reply != RequestNameReply.PRIMARY_OWNER:
        sys.exit(f"fake_notifications.py: could not own {NAME}: {reply}")
    print("READY", flush=True)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, bus.disconnect)
    with contextlib.suppress(Exception):
        await bus.wait_for_disconnect()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--caps", default="body,body-markup")
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.log, args.silent, args.caps))


if __name__ == "__main__":
    main()

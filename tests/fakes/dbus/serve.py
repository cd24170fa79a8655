"""Run fake logind and/or systemd1 on a bus, as a separate process.

    python serve.py --address ADDRESS [--state JSON] [--service logind] [--service systemd]
                    [--silent]

--state is a JSON object: can_suspend, can_hibernate, inhibit_delay_max_usec,
preparing_for_sleep, inhibitors (a list of [what, who, why, mode, uid, pid])
and sleep_error ([error name, message] the sleep methods answer), inhibit_log (a file
that gets a JSON line per lock taken and dropped), lid_closed, lid_file (read at each
question: "closed" or "open"), handle_lid_switch, handle_lid_switch_external_power,
handle_lid_switch_docked, docked, on_external_power, idle_hint, idle_since_usec and
idle_action for logind;
units ({name: {LoadState, ActiveState, SubState, UnitFileState, Result,
ExecMainStatus}}) and jobs ({unit: [argv, ...]}, what a started unit's job
runs) for systemd. --silent owns the names but never
answers a call (for timeout tests). Prints "READY" on stdout once the names
are owned; exits when the bus goes away or on SIGTERM.
"""

import argparse
import asyncio
import contextlib
import json
import signal
import sys

import fake_logind
import fake_systemd
from dbus_next import BusType, Message, MessageType, NameFlag, RequestNameReply
from dbus_next.aio import MessageBus


async def serve(address: str, services: list[str], state: dict[str, object],
                silent: bool) -> None:
    bus = await MessageBus(bus_address=address, bus_type=BusType.SYSTEM,
                           negotiate_unix_fd=True).connect()
    names = []
    if "logind" in services:
        names.append(fake_logind.NAME)
        if not silent:
            fake_logind.LoginManager(state).attach(bus)
    if "systemd" in services:
        names.append(fake_systemd.NAME)
        if not silent:
            fake_systemd.Manager(state).attach(bus)
    if silent:
        def swallow(msg: Message) -> bool:
            return msg.message_type == MessageType.METHOD_CALL
        bus.add_message_handler(swallow)
    for name in names:
        reply = await bus.request_name(name, NameFlag.DO_NOT_QUEUE)
        if reply != RequestNameReply.PRIMARY_OWNER:
            sys.exit(f"serve.py: could not own {name}: {reply}")
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, bus.disconnect)
    # A disconnect we asked for, or the daemon going away: both end the fake quietly.
    with contextlib.suppress(Exception):
        await bus.wait_for_disconnect()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--state", default="{}")
    parser.add_argument("--service", action="append", choices=["logind", "systemd"])
    parser.add_argument("--silent", action="store_true")
    args = parser.parse_args()
    services = args.service or ["logind", "systemd"]
    asyncio.run(serve(args.address, services, json.loads(args.state), args.silent))


if __name__ == "__main__":
    main()

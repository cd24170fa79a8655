"""Whether logind still wants the machine asleep: the lid, the idle state, a sleep in progress.

A refused sleep that logind started itself (the lid closed, the idle
action, a key) leaves no request behind; what is left is logind's state:
``LidClosed`` with the ``HandleLidSwitch*`` setting that applies now
(docked, on external power, or neither), and ``IdleHint`` with
``IdleSinceHint``, when nobody has used the machine since. Names and rules
as org.freedesktop.login1(5) and logind.conf(5) of systemd 252 give them.
"""

from __future__ import annotations

from dataclasses import dataclass

from suspendguard.model import Unavailable
from suspendguard.system.dbus.bus import DEFAULT_TIMEOUT, Session, converse, optional
from suspendguard.system.dbus.logind import LOGIND_MANAGER, LOGIND_NAME, LOGIND_PATH


@dataclass(frozen=True, slots=True)
class LogindWish:
    """logind's properties that say whether it still wants to sleep."""

    lid_closed: bool
    docked: bool  # docked, or more than one display connected (logind's own "Docked")
    on_external_power: bool
    handle_lid_switch: str
    handle_lid_switch_external_power: str  # "" when not set: HandleLidSwitch applies
    handle_lid_switch_docked: str
    idle_hint: bool
    idle_since_usec: int  # wall clock, µs since the epoch; 0: never idle
    idle_action: str
    preparing_for_sleep: bool
    # Block locks on sleep of another uid than root's ("WHO (WHY), uid N"): logind's own
    # lid and idle actions obey them, and so does a sleep the guard asks for again.
    blockers: tuple[str, ...] = ()

    @property
    def lid_action(self) -> str:
        """What logind does when the lid is closed now (its manager_handle_action's choice)."""
        if self.docked:
            return self.handle_lid_switch_docked
        if self.on_external_power and self.handle_lid_switch_external_power:
            return self.handle_lid_switch_external_power
        return self.handle_lid_switch


def logind_wish(timeout: float = DEFAULT_TIMEOUT,
                address: str | None = None) -> LogindWish | Unavailable:
    async def body(session: Session) -> LogindWish:
        props = await session.get_all(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER)
        locks = await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "ListInhibitors",
                                   expect="a(ssssuu)")
        blockers = tuple(f"{who} ({why}), uid {uid}" for what, who, why, mode, uid, _pid
                         in locks.body[0]
                         if mode == "block" and "sleep" in str(what).split(":") and uid != 0)

        def flag(name: str) -> bool:
            return bool(optional(props, name, bool))

        def word(name: str) -> str:
            return optional(props, name, str) or ""

        return LogindWish(
            lid_closed=flag("LidClosed"), docked=flag("Docked"),
            on_external_power=flag("OnExternalPower"),
            handle_lid_switch=word("HandleLidSwitch"),
            handle_lid_switch_external_power=word("HandleLidSwitchExternalPower"),
            handle_lid_switch_docked=word("HandleLidSwitchDocked"),
            idle_hint=flag("IdleHint"), idle_since_usec=optional(props, "IdleSinceHint", int) or 0,
            idle_action=word("IdleAction"), preparing_for_sleep=flag("PreparingForSleep"),
            blockers=blockers)

    return converse("logind", timeout, body, address)

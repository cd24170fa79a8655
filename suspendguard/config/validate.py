"""How one value of each schema kind is checked and turned into its record form."""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable
from typing import Any

from suspendguard.config.schema import (
    LAUNCHER_MATCH,
    LAUNCHER_STOPS,
    RULE_FIELDS,
    DrainRule,
    EscalationStep,
    LauncherRule,
    Rule,
)
from suspendguard.config.spec import TIMEOUT, WAIT, Bounds, Spec

# Policy rules are matched against every holder; a list longer than this is
# not a policy anyone writes, and validating it would eat the guard's deadline.
MAX_RULES = 1000


class Invalid(Exception):
    """What the value should have been; the loader adds the file, key and line."""


class InvalidEntry(Invalid):
    """What is wrong with one table of an array of tables, which the message names.

    ``index`` is the entry's place and ``count`` the array's length: the loader finds
    the entry's own line from them.
    """

    def __init__(self, index: int, count: int, why: str) -> None:
        super().__init__(f"entry {index + 1}: {why}")
        self.index = index
        self.count = count


def validate(spec: Spec, value: Any) -> Any:
    """``value`` checked against ``spec`` in its record form (lists become tuples)."""
    kind = spec.kind
    if kind in ("str", "path"):
        if not isinstance(value, str):
            raise Invalid("a string")
        _check_no_nul(value)
        if kind == "path" and not value.startswith("/"):
            raise Invalid(f"an absolute path, got {value!r}")
        return value
    if kind in ("int", "float"):
        assert spec.bounds is not None  # setting() gives every number its bounds
        return _number(value, kind, spec.bounds)
    if kind == "bool":
        if not isinstance(value, bool):
            raise Invalid("true or false")
        return value
    if kind == "choice":
        if value not in spec.choices:
            raise Invalid("one of " + ", ".join(f'"{c}"' for c in spec.choices) + f", got {got(value)}")
        return value
    if kind == "choices":
        items = _str_list(value)
        for item in items:
            if item not in spec.choices:
                raise Invalid(
                    "a list of " + ", ".join(f'"{c}"' for c in spec.choices) + f", got {item!r}"
                )
        return tuple(dict.fromkeys(items))
    if kind == "list":
        return tuple(_str_list(value))
    if kind == "globs":
        items = _str_list(value)
        for item in items:
            _check_glob(item)
        return tuple(items)
    if kind == "signal":
        return _ending_signal(signal_name(value))
    if kind == "escalate":
        return tuple(_step(item) for item in _str_list(value))
    if kind == "rules":
        return _tables(value, "[[policy.protect]]", "rules", _rule)
    if kind == "drainrules":
        return _tables(value, "[[policy.drain]]", "rules", _drain_rule)
    if kind == "launchers":
        return _tables(value, "[[drain.launchers]]", "launchers", _launcher)
    raise AssertionError(kind)  # pragma: no cover


def _tables(value: Any, example: str, what: str, read: Callable[[Any], Any]
            ) -> tuple[Any, ...]:
    """An array of tables, each read by ``read(table)``; what is wrong names its entry."""
    if not isinstance(value, list):
        raise Invalid(f"a list of tables (an array of tables such as {example})")
    if len(value) > MAX_RULES:
        raise Invalid(f"at most {MAX_RULES} {what}, got {len(value)}")
    out = []
    for i, v in enumerate(value):
        try:
            out.append(read(v))
        except Invalid as exc:
            raise InvalidEntry(i, len(value), str(exc)) from None
    return tuple(out)


def signal_name(name: str) -> str:
    """The canonical spelling ("SIGINT") of a signal name ("int", "sigint", "SIGINT")."""
    if not isinstance(name, str):
        raise Invalid("a signal name such as \"SIGINT\"")
    upper = name.upper()
    if not upper.startswith("SIG"):
        upper = "SIG" + upper
    try:
        return signal.Signals[upper].name
    except KeyError:
        raise Invalid(f'a signal name such as "SIGINT", got {name!r}') from None


# Signals whose default action stops a process: a holder sent one stays stopped, holding its
# node (SIGSTOP cannot even be caught), and the suspend it was sent for is vetoed.
STOP_SIGNALS = ("SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU")
# Signals whose default action is to ignore them: a holder without a handler runs on, and
# the drain waits its whole timeout to veto, while `check` would foresee the holder end.
IGNORED_SIGNALS = ("SIGCHLD", "SIGCONT", "SIGURG", "SIGWINCH")


def _ending_signal(name: str) -> str:
    """A signal that asks a holder to end: never one that stops it or that it ignores."""
    if name in STOP_SIGNALS:
        why = "it stops the holder, which keeps its node and stays stopped"
    elif name in IGNORED_SIGNALS:
        why = "its default action is to ignore it: a holder without a handler would not exit"
    else:
        return name
    raise Invalid(f"a signal that ends a process, such as \"SIGINT\" or \"SIGTERM\", got "
                  f"{name!r} ({why})")


def _check_glob(pattern: str) -> None:
    if not pattern:
        raise Invalid("an empty glob")
    if not pattern.startswith("/"):
        raise Invalid(f"an absolute path glob, got {pattern!r}")
    depth = 0
    for ch in pattern:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
    if depth:
        raise Invalid(f"a valid glob, got {pattern!r} (unclosed '[')")


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Invalid("a list of strings")
    for item in value:
        _check_no_nul(item)
    return list(value)


def _check_no_nul(text: str) -> None:
    # Paths and names end up in os calls, which raise ValueError on an embedded NUL.
    if "\0" in text:
        raise Invalid(f"a string without a NUL character, got {text!r}")


def _number(value: Any, kind: str, bounds: Bounds) -> float:
    what = "a number" if kind == "float" else "an integer"
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (kind == "int" and not isinstance(value, int))):
        raise Invalid(f"{what} {bounds.words()}")
    # TOML has nan, inf and integers of any length: nan compares false with
    # every bound (a busy_threshold of nan would read every device idle), and
    # 1e308 s or a 400-digit integer is no wait anyone means (it would reach a
    # unit's TimeoutStartSec as a 300-digit number).
    if not bounds.holds(value):
        raise Invalid(f"{what} {bounds.words()}, got {shown(value)}")
    return value


# An integer of more bits is sized, never turned into text: Python turns none of over
# 4300 digits (640 at the lowest limit it may be given) into text, and TOML's hexadecimal,
# octal and binary integers have no such limit.
SHOWN_BITS = 2000  # 603 digits


def shown(value: float) -> str:
    """A number as an error line gives it: an integer of many digits is cut short."""
    if isinstance(value, int) and value.bit_length() > SHOWN_BITS:
        # Its digits from its bits: one too many at most, hence "about".
        digits = math.floor(value.bit_length() * math.log10(2)) + 1
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits} digits"
    text = str(value)
    if isinstance(value, int) and len(text) > 24:
        return f"{text[:12]}... ({len(text.lstrip('-'))} digits)"
    return text


def got(value: Any) -> str:
    """Any TOML value as an error line gives it: a number by :func:`shown`, the rest by repr,
    which fails on an integer too long for text (in a list, say)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return shown(value)
    try:
        return repr(value)
    except ValueError:
        return f"a {type(value).__name__} holding an integer too long to show"


def _step(item: str) -> EscalationStep:
    name, sep, secs = item.partition(":")
    try:
        wait = float(secs) if sep else -1.0
    except ValueError:
        wait = -1.0
    if not WAIT.holds(wait):
        raise Invalid(f'steps like "SIGTERM:10", each wait {WAIT.words()} s, got {item!r}')
    return EscalationStep(_ending_signal(signal_name(name)), wait)


def _rule(value: Any) -> Rule:
    if not isinstance(value, dict):
        raise Invalid('must be a table such as { comm = "npu-smi" }')
    unknown = sorted(set(value) - set(RULE_FIELDS))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}; expected one of " + ", ".join(RULE_FIELDS))
    if not value:
        raise Invalid("needs at least one of " + ", ".join(RULE_FIELDS))
    for k, v in value.items():
        if k == "uid":
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                raise Invalid("uid must be an integer from 0 to 4294967295")
        elif not isinstance(v, str) or not v:
            raise Invalid(f"{k} must be a non-empty string")
    if "cmdline" in value:
        try:
            re.compile(value["cmdline"])
        # A huge repetition count or deep nesting fails outside re.error.
        except (re.error, OverflowError, RecursionError) as exc:
            raise Invalid(f"cmdline must be a valid regular expression ({exc})") from None
    return Rule(**value)


def _launcher(value: Any) -> LauncherRule:
    if not isinstance(value, dict):
        raise Invalid('must be a table such as { exe = "/opt/bin/launch", stop = "hold" }')
    fields = (*LAUNCHER_MATCH, "stop", "name", "restarts")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}; expected one of " + ", ".join(fields))
    stop = value.get("stop")
    if stop not in LAUNCHER_STOPS:
        raise Invalid("stop must be one of " + ", ".join(
            f'"{s}"' for s in LAUNCHER_STOPS) + f", got {got(stop)}")
    for k in ("name", "restarts"):
        if k in value and not isinstance(value[k], str):
            raise Invalid(f"{k} must be a string")
    match = {k: value[k] for k in LAUNCHER_MATCH if k in value}
    if not match:
        raise Invalid("needs at least one of " + ", ".join(LAUNCHER_MATCH))
    return LauncherRule(_rule(match), stop, value.get("name", ""), value.get("restarts", ""))


def _drain_rule(value: Any) -> DrainRule:
    if not isinstance(value, dict):
        raise Invalid("must be a table such as { uid = 1000, timeout_s = 90 }")
    fields = (*RULE_FIELDS, "timeout_s")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}; expected one of " + ", ".join(fields))
    if "timeout_s" not in value:
        raise Invalid("needs timeout_s, the wait for the holders it matches, "
                      "as in { uid = 1000, timeout_s = 90 }")
    timeout = value["timeout_s"]
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not TIMEOUT.holds(timeout)):
        raise Invalid(f"timeout_s must be a number {TIMEOUT.words()}, got {got(timeout)}")
    match = {k: v for k, v in value.items() if k != "timeout_s"}
    return DrainRule(_rule(match), float(timeout))

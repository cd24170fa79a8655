"""Read the TOML file once and validate it once into a Config."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from suspendguard.config.cluster import exclude_problem
from suspendguard.config.schema import SCHEMA, SECTIONS, Config
from suspendguard.config.spec import DAY_S
from suspendguard.config.trust import replaced, state_dir_problem, untrusted
from suspendguard.config.validate import Invalid, InvalidEntry, validate
from suspendguard.errors import ConfigError
from suspendguard.system.deadline import ANSWER_MARGIN_S, IDLE_MARGIN_S, needed_s
from suspendguard.system.terminal import safe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10
    import tomli as tomllib

DEFAULT_PATH = "/etc/suspendguard/config.toml"
ENV_VAR = "SUSPENDGUARD_CONFIG"
# A configuration is a few dozen lines; anything near this is a mistake or
# an attack, and reading it must stay far inside the guard's deadline.
MAX_BYTES = 1024 * 1024
# Why a file this user may not open is no configuration (status tells it from an invalid one).
DENIED = "permission denied reading the configuration"

_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?")
# An array-of-tables header, [[policy.protect]]: each starts one entry of the array.
_TABLES_HEADER = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_.-]+)\s*\]\]\s*(?:#.*)?$")
_ASSIGN = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*=")
# A user name as useradd and systemd take it (a trailing $ for a machine account).
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\$?")


def defaults() -> Config:
    return build({})


def resolve_path(cli_path: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """(path, explicit): --config wins over $SUSPENDGUARD_CONFIG over the default."""
    env = os.environ if environ is None else environ
    if cli_path:
        return cli_path, True
    if env.get(ENV_VAR):
        return env[ENV_VAR], True
    return DEFAULT_PATH, False


def load(cli_path: str | None = None, environ: Mapping[str, str] | None = None, *,
         as_root: bool | None = None) -> Config:
    """Read and validate the configuration; a missing default file means defaults.

    As root (``as_root``; default: whether this process is), the result's
    ``trust`` lists why root may not act on it (config/trust.py).
    """
    env = os.environ if environ is None else environ
    path, explicit = resolve_path(cli_path, env)
    read = _read(path, explicit)
    raw = None if read is None else read[0]
    if raw is None:
        config = defaults()
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{safe(path)}: not UTF-8 text") from None
        if text.startswith("\ufeff"):  # an editor's byte-order mark, which TOML does not allow
            raise ConfigError(f"{safe(path)}: starts with a byte-order mark (BOM), which TOML does "
                              "not allow: save it as UTF-8 without one")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{safe(path)}: TOML syntax error: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{safe(path)}: TOML nested too deeply") from None
        except ValueError:
            # A decimal integer past Python's limit on integer text (4300 digits).
            raise ConfigError(f"{safe(path)}: {_too_long(text)}") from None
        config = build(data, path, text)
    if os.geteuid() == 0 if as_root is None else as_root:
        trust = untrusted(config, env)
        if read is not None:
            trust += replaced(path, read[1], "configuration file")
        config = replace(config, trust=tuple(dict.fromkeys(trust)))
    return config


def _read(path: str, explicit: bool) -> tuple[bytes, os.stat_result] | None:
    """The file's bytes and what it was, read only when it is a regular file of at most MAX_BYTES."""
    try:
        # O_NONBLOCK: a FIFO must not hang the open; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{safe(path)}: configuration file not found") from None
        if link := _dangling(path):
            # The site's file was there and its target is lost: the defaults would drop
            # its protect rules and state folder, and signal what it protects.
            raise ConfigError(f"{safe(path)}: the symlink {safe(link)} leads nowhere: the "
                              "configuration it named is lost (remove the link for the "
                              "built-in defaults)") from None
        return None
    except PermissionError:
        raise ConfigError(f"{safe(path)}: {DENIED}") from None
    except OSError as exc:
        raise ConfigError(f"{safe(path)}: cannot open the configuration: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{safe(path)}: is a directory, expected a TOML file")
        # A device (/dev/zero) could be read for ever. Kernel files (/proc/self/mem)
        # pass as regular with size 0: the bounded read below keeps them in check.
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{safe(path)}: not a regular file, expected a TOML file")
        if st.st_size > MAX_BYTES:
            raise ConfigError(f"{safe(path)}: {st.st_size} bytes, more than a configuration's "
                              f"limit of {MAX_BYTES}")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise ConfigError(f"{safe(path)}: more than a configuration's limit of {MAX_BYTES} bytes")
        return b"".join(chunks), st
    except OSError as exc:
        raise ConfigError(f"{safe(path)}: cannot read the configuration: {exc.strerror}") from None
    finally:
        os.close(fd)


def _dangling(path: str) -> str | None:
    """The symlink on ``path`` (itself or a folder above it) that leads nowhere, if any."""
    here = path
    while True:
        if os.path.islink(here) and not os.path.exists(here):
            return here
        above = os.path.dirname(here)
        if above == here:
            return None
        here = above


def _too_long(text: str) -> str:
    """What is said of a TOML text holding an integer too long to read: its longest one."""
    longest = max(re.finditer(r"[0-9][0-9_]*", text), key=lambda m: m.end() - m.start(),
                  default=None)
    if longest is None:  # pragma: no cover - tomllib reads no integer without a digit
        return "an integer too long to read"
    digits = len(longest.group().replace("_", ""))
    line = text.count("\n", 0, longest.start()) + 1
    return f"an integer of {digits} digits (line {line}): too long to read, and more than any key takes"


def build(data: Mapping[str, Any], path: str = "<defaults>", text: str = "") -> Config:
    """Validate a parsed TOML document (possibly empty) into a Config."""
    for section in data:
        if section not in SCHEMA:
            raise ConfigError(
                f"{safe(path)}: unknown section [{safe(section)}]; expected one of "
                + ", ".join(f"[{s}]" for s in SCHEMA)
            )
        if not isinstance(data[section], dict):
            raise ConfigError(f"{safe(path)}: {section} must be a table [{section}]")
    values: dict[str, dict[str, Any]] = {}
    for section, specs in SCHEMA.items():
        given = data.get(section, {})
        for key in given:
            if key not in specs:
                raise ConfigError(
                    f"{_where(path, section, key, text)}: unknown key; "
                    f"expected one of {', '.join(specs)}"
                )
        out: dict[str, Any] = {}
        for key, spec in specs.items():
            try:
                out[key] = validate(spec, given.get(key, spec.default))
            except InvalidEntry as exc:
                at = _where(path, section, key, text, (exc.index, exc.count))
                raise ConfigError(f"{at}: {exc}") from None
            except Invalid as exc:
                raise ConfigError(f"{_where(path, section, key, text)}: expected {exc}") from None
            except ValueError as exc:
                # What a check did not foresee, such as an integer too long for text:
                # still one line naming the key, never a traceback.
                raise ConfigError(f"{_where(path, section, key, text)}: cannot be read "
                                  f"({safe(str(exc))})") from None
        values[section] = out
    _check_together(values, path, text)
    return Config(
        **{section: record(**values[section]) for section, record in SECTIONS.items()},
        path=None if path == "<defaults>" else path,
        loaded=path != "<defaults>",
    )


def _check_together(values: Mapping[str, Mapping[str, Any]], path: str, text: str) -> None:
    """The rules that span keys (each number's own range is its Spec's bounds)."""
    drain = values["drain"]
    idle = values["idle"]
    waits = [step.wait_s for step in drain["escalate"]]
    longest = max([drain["timeout_s"], *(r.timeout_s for r in values["policy"]["drain"])])
    needed = needed_s(longest, waits, bool(idle["backends"]), idle["settle_s"],
                      idle["command_timeout_s"])
    if drain["deadline_s"] < needed:
        parts = ["[drain] timeout_s" if longest == drain["timeout_s"]
                 else "the longest [[policy.drain]] timeout_s"]
        if waits:
            parts.append("the [drain] escalate waits")
        if idle["backends"]:
            parts.append("[idle] settle_s and twice command_timeout_s (with [idle] backends "
                         f"set: a reading before the drain and the settle after it; "
                         f"+{IDLE_MARGIN_S:g} s)")
        parts.append(f"{ANSWER_MARGIN_S:g} s to answer")
        # deadline_s cannot pass a day: past it, only the parts can be lowered.
        fix = ("lower those parts (deadline_s is at most "
               f"{DAY_S})" if needed > DAY_S else "raise deadline_s or lower timeout_s")
        raise ConfigError(
            f"{_where(path, 'drain', 'deadline_s', text)}: expected at least {needed:g} "
            f"({' + '.join(parts)}), got {drain['deadline_s']:g}: {fix}"
        )
    problem = state_dir_problem(values["state"]["dir"])
    if problem:
        raise ConfigError(f"{_where(path, 'state', 'dir', text)}: expected {problem}")
    for name in values["notify"]["users"]:
        if not _USER_NAME.fullmatch(name):
            raise ConfigError(f"{_where(path, 'notify', 'users', text)}: expected user names "
                              f"(letters, digits, . _ - and a trailing $), got {name!r}")
    slurm = values["slurm"]
    if slurm["exclude_file"] and not slurm["exclude_file"].startswith("/"):
        raise ConfigError(f"{_where(path, 'slurm', 'exclude_file', text)}: expected an absolute "
                          f"path or \"\" (none kept), got {slurm['exclude_file']!r}")
    for key in ("ascend_env", "dcmi_library"):
        # Sourced or loaded by a child that starts in /, never in this process's folder.
        if idle[key] and not idle[key].startswith("/"):
            raise ConfigError(f"{_where(path, 'idle', key, text)}: expected an absolute path "
                              f"or \"\" (the default places), got {idle[key]!r}")
    if not slurm["guard"]:
        raise ConfigError(f"{_where(path, 'slurm', 'guard', text)}: expected a command")
    for entry in slurm["exclude"]:
        if problem := exclude_problem(entry):
            raise ConfigError(f"{_where(path, 'slurm', 'exclude', text)}: {problem}")


def _where(path: str, section: str, key: str, text: str,
           entry: tuple[int, int] | None = None) -> str:
    """Where an error is: the file, the key and its line (an array entry's own line, given
    ``entry``, the entry's index and the array's length)."""
    line = _entry_line(text, section, key, *entry) if entry else _line_of(text, section, key)
    at = f" (line {line})" if line else ""
    # A path (from --config or $SUSPENDGUARD_CONFIG) or a quoted key may hold a newline or
    # ESC: shown escaped, the error stays one line and moves no terminal's cursor.
    return f"{safe(path)}: [{safe(section)}] {safe(key)}{at}"


def _line_of(text: str, section: str, key: str) -> int | None:
    """Best-effort line number of ``key`` inside ``[section]`` of a TOML text."""
    current = None
    # Lines end at "\n" alone, as TOML's do: splitlines() would also end one at a U+2028
    # or U+0085 in a comment.
    for number, line in enumerate(text.split("\n"), 1):
        m = _HEADER.match(line)
        if m:
            current = m.group(1)
            if current == f"{section}.{key}":
                return number
            continue
        m = _ASSIGN.match(line)
        if m and current == section and m.group(1) == key:
            return number
    return None


def _entry_line(text: str, section: str, key: str, index: int, count: int) -> int | None:
    """The line of the ``[[section.key]]`` header that starts entry ``index``, or None.

    Only when the headers found are as many as the entries: a header spelled otherwise
    (quoted, spaced) would shift the count, and no line beats a wrong one. An inline
    array (``protect = [...]``) has no headers: its key's line is the one there is.
    """
    name = f"{section}.{key}"
    headers = [number for number, line in enumerate(text.split("\n"), 1)
               if (m := _TABLES_HEADER.match(line)) and m.group(1) == name]
    if not headers:
        return _line_of(text, section, key)
    return headers[index] if len(headers) == count else None

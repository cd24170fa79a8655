"""What a Python interpreter's command line runs: a module (``-m``), a script, or neither.

The interpreter's own options come first and some take the next word as their
value (``python3 -W ignore -m torch.distributed.run``): that word is neither
the module nor the script.
"""

from __future__ import annotations

from collections.abc import Sequence

# Python's own options that take the next word as their value (``-W ignore``).
_PYTHON_VALUES = "WX"
_PYTHON_LONG_VALUES = ("--check-hash-based-pycs",)


def python_runs(args: Sequence[str]) -> tuple[str, str, Sequence[str]]:
    """What an interpreter's arguments run: ("-m", module, its arguments), ("script", path,
    its arguments), or ("", "", ()) for ``-c``, stdin or nothing."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _PYTHON_LONG_VALUES:
            i += 2
            continue
        if not arg.startswith("-") or arg == "-":
            return ("script", arg, args[i + 1:]) if arg != "-" else ("", "", ())
        if arg.startswith("--"):
            i += 1
            continue
        for j, flag in enumerate(arg[1:], 2):
            if flag == "c":
                return "", "", ()
            if flag == "m":
                if arg[j:]:
                    return "-m", arg[j:], args[i + 1:]
                return ("-m", args[i + 1], args[i + 2:]) if i + 1 < len(args) else ("", "", ())
            if flag in _PYTHON_VALUES:
                i += 0 if arg[j:] else 1  # ``-Wignore``, or ``-W ignore``
                break
        i += 1
    return "", "", ()

"""The fake systemd1 of tests/fakes/dbus/serve.py, its units answering ``Transient`` too.

A unit made by ``systemd-run`` (StartTransientUnit) says ``Transient=yes`` on the
org.freedesktop.systemd1.Unit interface; a unit's "Transient" in --state sets it.
Run as serve.py is run (the same arguments); no user manager runs on this machine.
No `from __future__ import annotations`: dbus-next reads the D-Bus signatures
from the annotations.
"""

# D-Bus signatures in annotations ("b") are not Python names.
# ruff: noqa: F821

import runpy
import sys
from pathlib import Path

FAKES = Path(__file__).resolve().parent.parent / "fakes" / "dbus"
sys.path.insert(0, str(FAKES))

import fake_systemd  # noqa: E402 - found beside serve.py, once its folder is on the path
from dbus_next.service import PropertyAccess, dbus_property  # noqa: E402


class TransientUnit(fake_systemd.Unit):
    @dbus_property(access=PropertyAccess.READ)
    def Transient(self) -> "b":
        return bool(self.props.get("Transient", False))


# serve.py's Manager makes every unit object through this name, looked up at each load.
fake_systemd.Unit = TransientUnit  # type: ignore[misc]
runpy.run_path(str(FAKES / "serve.py"), run_name="__main__")

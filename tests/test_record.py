"""The frozen record type that keeps dataclasses off the suspend path."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from suspendguard.record import FrozenInstanceError, asdict, fields, record, replace


@record
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()

    @functools.cached_property
    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


def test_init_eq_hash_repr() -> None:
    p = Point(1, y=2)
    assert p == Point(x=1, y=2, tags=()) and p != Point(1, 3)
    assert hash(p) == hash(Point(1, 2)) and len({p, Point(1, 2)}) == 1
    assert repr(p) == "Point(x=1, y=2, tags=())"
    assert (p == (1, 2, ())) is False  # a record is not a tuple
    assert p.norm == 3 and p == Point(1, 2)  # a cached property is not a field


def test_frozen() -> None:
    p = Point(1)
    with pytest.raises(FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y  # type: ignore[misc]


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="missing required argument 'x'"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values"):
        Point(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional"):
        Point(1, 2, (), 4)  # type: ignore[call-arg]


def test_replace_fields_asdict() -> None:
    p = Point(1, 2, ("a",))
    assert replace(p, y=5) == Point(1, 5, ("a",))
    assert fields(p) == ("x", "y", "tags")
    assert asdict(p) == {"x": 1, "y": 2, "tags": ("a",)}
    with pytest.raises(TypeError, match="no field 'z'"):
        replace(p, z=1)


def test_field_order_with_defaults_is_checked() -> None:
    with pytest.raises(TypeError, match="without a default follows"):
        @record
        class Bad:
            a: int = 0
            b: int


@pytest.mark.parametrize("argv", [["check", "--dry-run"], ["sleep-hook", "post", "suspend"],
                                  ["sleep-hook", "pre", "suspend"]])
def test_suspend_path_does_not_import_dataclasses_dbus_or_asyncio(tmp_path: object,
                                                                  argv: list[str]) -> None:
    conf = f"{tmp_path}/c.toml"
    with open(conf, "w") as f:
        f.write(f'[state]\ndir = "{tmp_path}/state"\n[devices]\nfamilies = []\n')
    code = (
        "import sys\n"
        "from suspendguard.cli import main\n"
        f"main({[*argv, '--config', conf]!r})\n"
        "heavy = ('dataclasses', 'dbus_next', 'asyncio', 'inspect')\n"
        "print('HEAVY=' + ','.join(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "HEAVY=", proc.stdout

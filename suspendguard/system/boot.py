"""Which boot this is, named the same inside a unit's sandbox and outside it.

A stop is kept with the boot it was made in, and restore leaves down a stop
of an earlier boot. ``/proc/sys/kernel/random/boot_id`` cannot say it:
systemd-nspawn gives a container its own boot id by mounting a file over
that one, and a unit's sandbox (``ProtectKernelTunables=``, a procfs of its
own) does not see the mount, so the veto unit and a root shell read
different ids in the same boot. The kernel's boot time (``/proc/stat``'s
btime) and when this PID namespace's init started are the same inside any
sandbox of one PID namespace, and new at each boot of a host or a container.
"""

from __future__ import annotations

from suspendguard.system.procfs import ProcAccessError, ProcFS


def boot_id(proc: ProcFS) -> str:
    """This boot's identity, "BTIME.START"; "" when it cannot be read."""
    try:
        with open(f"{proc.root}/stat", "rb") as f:
            btime = next((line.split()[1] for line in f if line.startswith(b"btime ")), b"")
        init = proc.stat(1)
    except (OSError, IndexError, ProcAccessError):
        return ""
    if not btime.isdigit() or init is None:
        return ""
    return f"{btime.decode()}.{init.start_time}"


def kernel_boot_id(proc: ProcFS) -> str:
    """``sys/kernel/random/boot_id``, what a version before :func:`boot_id` recorded."""
    try:
        with open(f"{proc.root}/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return ""


def boot_ids(proc: ProcFS) -> frozenset[str]:
    """Every name this boot is recorded under: :func:`boot_id`, and the kernel's id."""
    return frozenset(b for b in (boot_id(proc), kernel_boot_id(proc)) if b)

"""``suspendguard doctor``: a read-only preflight of this host's suspend setup, each finding with its fix."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from suspendguard.doctor.checks import doctor, vram_in_use_mb
from suspendguard.doctor.finding import to_fix
from suspendguard.doctor.host import Host
from suspendguard.errors import UsageError

if TYPE_CHECKING:
    from suspendguard.commands.context import Context

MARK = {"error": "!", "warning": "!", "note": "-"}


def command(args: argparse.Namespace, ctx: Context) -> int:
    """0: nothing to fix; 1: findings to fix."""
    config = ctx.config()
    if args.root is not None and not args.root.strip():
        # ("$UNSET"): never this host's own files in the place of the tree meant.
        raise UsageError("doctor --root: expected a folder, got an empty string (leave --root "
                         "out to check this host)")
    root = args.root or "/"
    if not os.path.isdir(root):
        raise UsageError(f"doctor --root {root}: not a folder")
    # The VRAM in use is this host's, asked of NVML: only when the files read are its own.
    vram = vram_in_use_mb(config) if root == "/" else None
    findings = doctor(Host(root), config, vram)
    if args.json:
        json.dump({"root": root, "vram_in_use_mb": vram, "to_fix": len(to_fix(findings)),
                   "findings": [f.to_json() for f in findings]}, ctx.out, indent=2)
        ctx.out.write("\n")
    elif not findings:
        ctx.out.write("nothing to fix: no finding\n")
    else:
        for f in findings:
            ctx.out.write(f"{MARK[f.severity]} {f.severity}: {f.text} [{f.id}]\n"
                          f"    fix: {f.fix}\n")
        ctx.out.write(f"{len(to_fix(findings))} to fix\n")
    return 1 if to_fix(findings) else 0

"""The CUDA probe, run as a short-lived child by the NVIDIA health check.

The driver API through ctypes (no torch, no CUDA toolkit): ``cuInit``,
``cuDeviceGetCount``, and a context made and destroyed on each device, which
is what a job does first when it starts again. In a child because a context
opens the device nodes (the guard must hold none of its own) and because a
driver that hangs after resume takes only the child with it: the runner
kills it at the timeout. Prints one JSON object on stdout; stdlib only.
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any


def probe(library: str) -> dict[str, Any]:
    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        return {"missing": f"cannot load {library} ({exc})"}
    ret = int(lib.cuInit(0))
    if ret != 0:
        return {"init": ret}
    count = ctypes.c_int(0)
    ret = int(lib.cuDeviceGetCount(ctypes.byref(count)))
    if ret != 0:
        return {"init": 0, "count_ret": ret}
    devices = []
    for index in range(count.value):
        device = ctypes.c_int(0)
        ret = int(lib.cuDeviceGet(ctypes.byref(device), index))
        if ret != 0:
            devices.append({"device": index, "call": "cuDeviceGet", "ret": ret})
            continue
        context = ctypes.c_void_p(0)
        ret = int(lib.cuCtxCreate_v2(ctypes.byref(context), 0, device))
        if ret == 0:
            lib.cuCtxDestroy_v2(context)
        devices.append({"device": index, "call": "cuCtxCreate", "ret": ret})
    return {"init": 0, "count": count.value, "devices": devices}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    json.dump(probe(args[0] if args else "libcuda.so.1"), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Log scan throughput against ``grep -E`` with the same wordings, in the same run.

Run on demand (not a test):

    .venv/bin/python benchmarks/logs_throughput.py [--mb 200] [--files 8] [--runs 3]

It writes a corpus of Ascend-style plog/device logs (mostly INFO/DEBUG noise,
one documented failure line in a few thousand) to a temporary folder, scans it
with ``suspendguard.logs.search.search`` and with ``LC_ALL=C grep -E -c -f PATTERNS
-r``, best of N interleaved runs each (files in the page cache for both), and prints MB/s
and the ratio. Target: at least 0.8x grep, with forked workers.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suspendguard.logs.rules import RULES
from suspendguard.logs.search import search

NOISE = [
    "[INFO] RUNTIME({pid},python):{t} [stream.cc:700]{pid} Setup:stream created, "
    "stream_id={n}, priority=0, flags=0.\n",
    "[DEBUG] HCCL({pid},python):{t} [op_base.cc:1292] [{pid}]Entry-HcclCommInitRootInfoInner:"
    "ranks[8], rank[{n}], rootinfo: host ip[127.10.0.1] port[60000] nicDeploy[1]\n",
    "[EVENT] PROFILING({pid},python):{t} [msprof_callback_impl.cpp:79] >>> (tid:{n}) "
    "MsprofCtrlCallback called, type: 255\n",
    "[INFO] TSCH(-1,null):{t} {n} (dieid:0,cpuid:0) task_scheduler_engine.c:512 "
    "proc_task_report: task done, stream_id=3, task_id={n}\n",
    "[INFO] GE({pid},python):{t} [graph_manager.cc:1833]{pid} RunGraph:run graph {n} success, "
    "session_id=0, graph_id=1\n",
    "[WARNING] DRV({pid},python):{t} [devdrv] [devdrv_get_dev_info 210] dev_id=0 info_type={n}\n",
    "[INFO] HCCL({pid},python):{t} [heartbeat.cc:951] [{n}][HCCL_TRACE]rank [127.10.0.1/1]: "
    "heartbeat send ok\n",
]
HITS = [
    "[ERROR] TSCH(-1,null):{t} 1 (dieid:0,cpuid:0) device_management_plat.c:563 "
    "suspend_ack: suspend pre check fail, hwts is busy\n",
    "[ERROR] RUNTIME({pid},python):{t} {pid} EventIdAlloc:drvEventIdAlloc:errorcode = 7\n",
    "[ERROR] RUNTIME({pid},python):{t} [event_david.cc:104]{pid} GenEventId:Failed to allocate "
    "event id, device_id=0, tsId=0, retCode=0x7020019.\n",
    "[ERROR] RecentErrMsg: [PID: {pid}] {t} Memory_Allocation_Failure(EL0004): Failed to allocate"
    " memory.\n        Possible Cause: Available memory is insufficient.\n",
    "[ERROR] TSCH(-1,null):{t} 1 (cpuid:0) task_scheduler_engine.c:707 proc_model_stream_unbind: "
    "unbind model stream failed, stream is running. stream->model_id=512\n",
]


def _stamp(i: int) -> str:
    s = i // 1000
    return f"2026-11-29-{(s // 3600) % 24:02d}:{(s // 60) % 60:02d}:{s % 60:02d}.{i % 1000:03d}.000"


def make_corpus(folder: Path, mb: int, files: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    per_file = mb * 1024 * 1024 // files
    total = 0
    for k in range(files):
        sub = folder / "debug" / ("plog" if k % 2 else f"device-{k % 4}")
        sub.mkdir(parents=True, exist_ok=True)
        lines = []
        size = 0
        i = 0
        while size < per_file:
            i += 1
            tmpl = rng.choice(HITS) if rng.random() < 1 / 3000 else rng.choice(NOISE)
            line = tmpl.format(pid=1000 + k, t=_stamp(i), n=i)
            lines.append(line)
            size += len(line)
        data = "".join(lines).encode()
        (sub / f"plog-{1000 + k}_2026112900000{k}.log").write_bytes(data)
        total += len(data)
    return total


def _ere(text: str) -> str:
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def grep_patterns() -> list[str]:
    """Every documented wording of the catalog, as grep -E patterns."""
    out = []
    for rule in RULES:
        for p in rule.patterns:
            out.append(_ere(p.also[0] if p.also else p.needle))
    return list(dict.fromkeys(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-logs-bench-") as tmp:
        folder = Path(tmp)
        size = make_corpus(folder, args.mb, args.files)
        pats = folder / "patterns.txt"
        pats.write_text("\n".join(grep_patterns()) + "\n")
        corpus = str(folder / "debug")
        # Warm the page cache for both contenders.
        subprocess.run(["cat", *map(str, folder.rglob("*.log"))], stdout=subprocess.DEVNULL,
                       check=True)
        def run_grep() -> int:
            proc = subprocess.run(
                ["grep", "-E", "-r", "-c", "-f", str(pats), corpus],
                stdout=subprocess.PIPE, text=True, env={**os.environ, "LC_ALL": "C"},
                check=False,
            )
            return sum(int(x.rsplit(":", 1)[1]) for x in proc.stdout.split())

        # Interleaved, best of N each: on a shared machine load comes and goes,
        # and both contenders should meet the same weather.
        t_scan = t_grep = float("inf")
        report = None
        grep_lines = 0
        for _ in range(args.runs):
            t = time.perf_counter()
            report = search([corpus], max_bytes=1 << 40)
            t_scan = min(t_scan, time.perf_counter() - t)
            t = time.perf_counter()
            grep_lines = run_grep()
            t_grep = min(t_grep, time.perf_counter() - t)
        mb = size / 1e6
        findings = len(report.findings) if report else 0
        print(f"corpus: {mb:.1f} MB in {args.files} files; {len(grep_patterns())} wordings")
        print(f"suspendguard logs: {mb / t_scan:8.1f} MB/s  ({t_scan:.3f} s, {findings} findings)")
        print(f"grep -E          : {mb / t_grep:8.1f} MB/s  ({t_grep:.3f} s, {grep_lines} lines)")
        print(f"ratio scan/grep  : {t_grep / t_scan:.2f}x (target >= 0.8x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

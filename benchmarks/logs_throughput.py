"""Log scan throughput against ``grep -E`` with the same wordings, in the same run.

Run on demand (not a test):

    .venv/bin/python benchmarks/logs_throughput.py [--mb 200] [--files 8] [--runs 5]
        [--baseline DIR]

It writes a corpus of Ascend-style plog/device logs (mostly INFO/DEBUG noise,
one documented failure line in a few thousand, some of them known only by the
vendor code they carry) to a temporary folder, scans it with
``suspendguard.logs.search.search`` and with ``LC_ALL=C grep -E -c -f PATTERNS -r``,
N interleaved runs each (files in the page cache for all), and prints MB/s and
the ratio, from the best run and from the median run. grep gets what the
scanner looks for: every wording, and the shapes of the vendor codes, every
return-code form the scanner takes (0x + 7 hex digits and 11757xxxx as well,
given to grep since the scanner took them; the ratio against the wordings
alone is printed too). ``--baseline DIR``: also
time the scanner of another checkout (e.g. ``git worktree add DIR main``) on
the same corpus, in the same runs. Target: at least 0.8x grep, with forked
workers.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and "--scan-only" not in sys.argv:
    sys.path.insert(0, str(REPO))

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
    # Known by their codes only (no wording of the catalog).
    "[ERROR] RUNTIME({pid},python):{t} [api_c.cc:731]{pid} rtStreamSynchronize:ErrCode=507010, "
    "desc=[ts lost heartbeat], InnerCode=0x7150050\n",
    "EJ0001: [PID: {pid}] {t} Failed to initialize the HCCP process.\n",
    "dcmi model initialized failed, because the device is used. ret is -8020\n",
]
# The vendor codes' shapes (suspendguard/logs/codes.py) as grep -E can say them:
# every return code form, without the lookarounds ERE has not (grep then counts
# a few lines more, never fewer).
_RETURN = "(-8[0-9]{3}|[1-5][0-9]{5}|0x[0-9a-fA-F]{7}|11757[0-9]{4})"
CODE_SHAPES = [
    "E[0-9A-Z][0-9]{4}",
    "ERR[0-9]{5}",
    f"ret(Code)?( is | ?[=:[] ?){_RETURN}",
    f"rr(or)?(Code| [Cc]ode|_code)( is | ?[=:] ?){_RETURN}",
    f"result ?[=:] ?{_RETURN}",
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


def _grep(patterns: Path, corpus: str) -> tuple[float, int]:
    t = time.perf_counter()
    proc = subprocess.run(
        ["grep", "-E", "-r", "-c", "-f", str(patterns), corpus],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "LC_ALL": "C"}, check=False,
    )
    return time.perf_counter() - t, sum(int(x.rsplit(":", 1)[1]) for x in proc.stdout.split())


def _scan(corpus: str) -> tuple[float, int]:
    t = time.perf_counter()
    report = search([corpus], max_bytes=1 << 40)
    return time.perf_counter() - t, len(report.findings)


def _scan_elsewhere(checkout: str, corpus: str) -> tuple[float, int]:
    """The scan of a checkout, timed in an interpreter of its own."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--scan-only", corpus],
        stdout=subprocess.PIPE, text=True, check=True,
        env={**os.environ, "PYTHONPATH": checkout}, cwd=checkout,
    )
    seconds, findings = proc.stdout.split()
    return float(seconds), int(findings)


def _line(name: str, mb: float, times: list[float], count: int, what: str) -> str:
    best, median = min(times), statistics.median(times)
    return (f"{name:<22}: {mb / best:8.1f} MB/s best ({best:.3f} s), {mb / median:8.1f} MB/s "
            f"median ({median:.3f} s), {count} {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline", metavar="DIR", help="also time this checkout's scanner")
    ap.add_argument("--scan-only", metavar="CORPUS", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scan_only:
        seconds, findings = _scan(args.scan_only)
        print(seconds, findings)
        return 0
    with tempfile.TemporaryDirectory(prefix="sg-logs-bench-") as tmp:
        folder = Path(tmp)
        size = make_corpus(folder, args.mb, args.files)
        words = folder / "wordings.txt"
        words.write_text("\n".join(grep_patterns()) + "\n")
        both = folder / "patterns.txt"
        both.write_text("\n".join(grep_patterns() + CODE_SHAPES) + "\n")
        corpus = str(folder / "debug")
        # Warm the page cache for all contenders.
        subprocess.run(["cat", *map(str, folder.rglob("*.log"))], stdout=subprocess.DEVNULL,
                       check=True)
        # Interleaved: on a shared machine load comes and goes, and every
        # contender should meet the same weather.
        times: dict[str, list[float]] = {"scan": [], "grep": [], "words": [], "base": []}
        counts: dict[str, int] = {}
        for _ in range(args.runs):
            # Both checkouts' scans run in a fresh interpreter of their own: forking
            # workers from this one, which made the corpus, would cost more.
            for key, run in (("scan", lambda: _scan_elsewhere(str(REPO), corpus)),
                             ("grep", lambda: _grep(both, corpus)),
                             ("words", lambda: _grep(words, corpus)),
                             ("base", lambda: _scan_elsewhere(args.baseline, corpus))):
                if key == "base" and not args.baseline:
                    continue
                seconds, counts[key] = run()
                times[key].append(seconds)
        mb = size / 1e6
        print(f"corpus: {mb:.1f} MB in {args.files} files; {len(grep_patterns())} wordings, "
              f"{len(CODE_SHAPES)} code shapes; {args.runs} runs")
        print(_line("suspendguard logs", mb, times["scan"], counts["scan"], "findings"))
        if args.baseline:
            print(_line("baseline checkout", mb, times["base"], counts["base"], "findings"))
        print(_line("grep -E, all", mb, times["grep"], counts["grep"], "lines"))
        print(_line("grep -E, wordings only", mb, times["words"], counts["words"], "lines"))
        for key, label in (("grep", "all"), ("words", "wordings only")):
            best = min(times[key]) / min(times["scan"])
            median = statistics.median(times[key]) / statistics.median(times["scan"])
            print(f"ratio scan/grep ({label}): {best:.2f}x best, {median:.2f}x median "
                  "(target >= 0.8x)")
        if args.baseline:
            best = min(times["base"]) / min(times["scan"])
            median = statistics.median(times["base"]) / statistics.median(times["scan"])
            print(f"ratio scan/baseline: {best:.2f}x best, {median:.2f}x median (>1: faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

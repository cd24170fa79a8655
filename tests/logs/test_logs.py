"""The log reader and the rule catalog, on documented lines."""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from helpers import FIXTURES as ALL_FIXTURES
from helpers import REPO

from suspendguard.logs.codes import SHAPES, window_search
from suspendguard.logs.codes import markdown_table as codes_markdown_table
from suspendguard.logs.entries import read_text
from suspendguard.logs.matching import classify, markdown_table, needles
from suspendguard.logs.naming import name_record
from suspendguard.logs.reader import read_file
from suspendguard.logs.rules import RULES

if sys.version_info >= (3, 11):
    import re._parser as sre_parse
else:  # pragma: no cover - 3.10
    import sre_parse

FIXTURES = ALL_FIXTURES / "ascend-logs"
FINDINGS_PAGE = REPO / "docs" / "log-findings.md"

# The rule of every record (by its first line number) of every fixture file.
# None: a line that must not be reported.
EXPECTED = {
    "known-failures.log": {
        1: "event-id-exhausted",  # [devdrv] [drvEventIdAlloc 647] error.
        2: "event-id-exhausted",  # EventIdAlloc:drvEventIdAlloc:errorcode = 7
        3: "event-id-exhausted",  # EventIdAlloc:id = -1 (INFO)
        4: "stream-unbind-running",
        5: "hwts-busy-suspend",
        6: "hwts-busy-suspend",  # process_low_power_cmd: ts suspend ack ret=1.
    },
    "older-masked-and-device-log.log": {
        1: "event-id-exhausted",  # masked: no pid, no time
        2: "event-id-exhausted",
        3: "event-id-exhausted",  # masked without the stars
        4: "stream-unbind-running",  # (cpuid:0) only, no dieid
        5: None,  # TEFUSION InitPyLogger
        6: None,  # PROFILING
        7: None,  # TDT
    },
    # Lines 1-3, 7-11 (a RecentErrMsg block to 16), 24, 25: verbatim from the
    # CANN troubleshooting texts cited in rules.py; the others are composed from
    # the message formats printed by the CANN runtime source and the issues cited.
    "newer-wordings.log": {
        1: "event-id-exhausted",
        2: "event-id-exhausted",
        3: "event-id-exhausted",
        4: "event-id-exhausted",
        5: "event-id-exhausted",
        6: None,
        7: "stream-exhausted",
        8: "stream-exhausted",
        9: "notify-exhausted",
        10: "notify-exhausted",
        11: "device-oom",  # the head of a 6-line block that also says 507033
        17: "device-busy",
        18: "device-busy",
        19: None,  # drvRetCode=87: some other driver failure
        20: "device-busy",
        21: "device-busy",
        22: "device-oom",
        23: "heartbeat-lost",
        24: "hccl-peer-lost",
        25: None,
        26: None,  # ts suspend ack ret=0: success
        27: None,  # ret=10 is not ret=1
    },
    # Verbatim published lines; sources line by line in SOURCES.md.
    "real-world-wordings.log": {
        1: "device-held-by-previous-job",  # EJ0001 (2-line block)
        3: "device-held-by-previous-job",  # EJ0001 behind a Ray prefix
        4: "device-held-by-previous-job",  # MindSpore: other processes occupying this card
        5: "heartbeat-lost",  # Device[1] lost heartbeat.
        6: "heartbeat-lost",  # rtDeviceSynchronizeWithTimeout ... reason=lost heartbeat
        7: "heartbeat-lost",  # its consequence: runtime result = 507010, the lost heartbeat's code
        8: "aicore-exception",  # rtEventRecord ... reason=aicore exception: not event IDs
        9: "aicore-exception",  # record event failed, runtime result = 507015 (its code)
        10: "aicore-exception",  # desc=[vector core exception]
        11: "aicore-exception",  # rtEventRecord execution failed, reason=vector core exception
        12: "aicore-exception",  # record event failed, runtime result = 507035: not event IDs
        13: "aicore-exception",
        14: "aicore-exception",  # Kernel task happen error, retCode=0x26, [aicore exception]
        15: "aicore-exception",  # Aicore kernel execute failed
        16: None,  # an ordinary tsdaemon EVENT line
        17: "device-resources-not-released",  # Event id=0x8c17a005
    },
    # Wordings without a published capture, in lines composed around them.
    "composed-from-formats.log": {
        1: "device-held-by-previous-job",  # E30003 NN processes
        2: "device-oom",  # runtime result = 207001
        3: None,  # 2070010 is another number
        4: "stream-exhausted",  # 0x7020023 in decimal
        5: None,  # 1117571619 is another number
        6: "device-resources-not-released",  # Recycle warn ... _trs_release_by_exit_stage
        7: "heartbeat-lost",  # The task scheduler loses the heartbeat
        8: "heartbeat-lost",  # Device lost heartbeat (no index)
        9: None,  # 0x8c104e00: a sibling id that is not a release failure
        10: "device-resources-not-released",  # 0x8c1fa006
        11: "device-busy",  # DCMI -8020, resource occupied
        12: "heartbeat-lost",  # ErrCode=507010 with a wording the catalog lacks
        13: "hccl-peer-lost",  # EI0002, a timeout that names a peer's absence
    },
    # Verbatim published lines carrying vendor codes; sources in SOURCES.md.
    "vendor-codes.log": {
        1: "device-oom",  # EL0004 behind a vLLM prefix: no wording of the catalog
        2: "device-oom",  # runtime result = 207001
        3: None,  # 507013 (sys dma): known, not ours; "Timeout" in the wording
        4: None,  # ERR00100: torch_npu's wrapper code
        5: "aicore-exception",  # error code is 507035 (vector core exception)
        6: None,  # 107002 (context null): a fault of the program
        7: None,  # EE1001
        8: None,  # ret = 507008
        9: None,  # 507001, "Stream", "Timeout"
        10: None,  # 561103 (aclnn inner nullptr): known, not ours
        11: None,  # EH9999: internal error
        12: None,  # result = 500001 (ACL_ERROR_FAILURE)
        13: None,  # DCMI -8005
        14: None,  # ERR02200 and EI0001, HCCL_EXEC_TIMEOUT
        15: None,  # module_name=EL9999
        16: "device-oom",  # the driver's own out-of-memory line
        17: None,  # module_name=EE8888: not in the table (a note)
        18: None,  # "the model stream execute failed"
        19: None,  # "Memory async copy failed"
        20: "device-busy",  # a RecentErrMsg block: EE1001 ... open device failed, 507033
        31: None,  # torch_npu.memory, "can be ignored"
        32: None,  # HcclCommInitRootInfo failed, errNo in hex
    },
    # The frameworks' wordings (torch_npu, MindSpore, vLLM, CANN), verbatim; SOURCES.md.
    "framework-wordings.log": {
        1: "device-oom", 2: "device-oom", 3: "device-oom", 4: "device-oom",
        5: "stream-exhausted", 6: "stream-exhausted", 7: "stream-exhausted",
        8: "stream-exhausted", 9: "stream-exhausted", 10: "stream-exhausted",
        11: None,  # Invalid_Argument(EE1001): known, not ours, so no unlisted finding
        12: None,  # 207005 (resource alloc fail): known, not ours
    },
    # The same frameworks' formats, composed around their source strings; SOURCES.md.
    "framework-formats.log": {
        1: "device-task-abort", 2: "device-task-abort", 3: "device-task-abort",
        4: "device-memory-fault", 5: "device-memory-fault", 6: "device-memory-fault",
        7: "device-memory-fault", 8: "device-memory-fault",
        9: "device-oom", 10: "stream-exhausted",
        11: "unlisted-named-failure", 12: "unlisted-named-failure",
        13: "device-task-abort",  # the code is in the reference: the reference wins
        14: None,  # ACL_ERROR_RT_STREAM_ABORT(107023): known, not ours
        15: None,  # "Force stop", "FORCE STOP" not as torch_npu throws it
    },
}


def test_every_fixture_file_has_expectations() -> None:
    logs = [p.name for p in FIXTURES.iterdir() if p.name != "SOURCES.md"]
    assert sorted(logs) == sorted(EXPECTED)


def test_aicore_exception_is_not_event_exhaustion() -> None:
    # The false alarm of the old catch-all "rtEventRecord ... fail" patterns.
    for text in (
        "rtEventRecord execution failed, reason=aicore exception[FUNC:FuncErrorReason]",
        "aclrtRecordEventImpl:record event failed, runtime result = 507035",
        '"[PTA]:"aclrtRecordEvent error! ret = 507015, eventAllocatorType = -1""',
    ):
        rule = classify(text, RULES)
        assert rule is None or rule.id == "aicore-exception", text
    # Real exhaustion through the same call is still found.
    text = "rtEventRecord:ErrCode=207007, desc=[driver error:no event resource]"
    assert (c := classify(text, RULES)) is not None and c.id == "event-id-exhausted"


def test_vendor_ids_are_knowledge_base_codes() -> None:
    ids = {r.id: r.vendor_ids for r in RULES}
    assert ids["heartbeat-lost"] == ("AISW_CANN_Runtime_055",)
    assert "0x8C17A005" in ids["device-resources-not-released"]
    assert "AISW_PyTorch_Start_03" in ids["device-held-by-previous-job"]
    for rule in RULES:
        for vid in rule.vendor_ids:
            assert re.fullmatch(r"AISW_[A-Za-z0-9_]+|0x[0-9A-F]{8}", vid), vid
            assert f"`{vid}`" in markdown_table(RULES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_line_classified(name: str) -> None:
    records = read_text((FIXTURES / name).read_text(), name)
    got = {r.line: (c.id if (c := name_record(r.text, RULES).rule) else None) for r in records}
    assert got == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fast_scanner_agrees_with_the_reader(name: str, tmp_path: Path) -> None:
    path = FIXTURES / name
    fd = os.open(path, os.O_RDONLY)
    try:
        result = read_file(fd, name, 1 << 20)
    finally:
        os.close(fd)
    want = {line: rule for line, rule in EXPECTED[name].items() if rule}
    assert {f.line: f.rule for f in result.findings} == want


def test_header_fields() -> None:
    text = (FIXTURES / "known-failures.log").read_text()
    r = read_text(text)
    assert (r[0].level, r[0].module, r[0].pid, r[0].pname) == ("ERROR", "DRV", 18401, "main")
    assert r[0].time == datetime(2023, 5, 29, 17, 53, 11, 569787)  # no colon after ")"
    assert (r[1].tid, r[1].func) == (18409, "EventIdAlloc")
    dev = r[4]
    assert dev.kind == "device"
    assert (dev.pid, dev.pname) == (None, None)  # -1,null: no host process
    assert (dev.source, dev.func) == ("device_management_plat.c:563", "suspend_ack")
    assert dev.message == "suspend pre check fail, hwts is busy"


def test_masked_lines_have_no_pid_or_time() -> None:
    r = read_text((FIXTURES / "older-masked-and-device-log.log").read_text())
    for rec in r[:3]:
        assert (rec.kind, rec.pid, rec.time, rec.module) == ("masked", None, None, rec.module)
    assert r[0].module == "DRV"
    assert r[2].message == "EventIdAlloc:id = -1"


def test_runtime_lines() -> None:
    r = read_text((FIXTURES / "newer-wordings.log").read_text())
    first = r[0]
    assert first.kind == "runtime"
    assert (first.source, first.tid, first.func) == ("event_david.cc:101", 277881, "GenEventId")
    assert first.message.startswith("Alloc Event resource failed.")
    three = read_text(
        "[WARNING] CORE(51545,ffff8ba74480,python):2019-07-25-19:17:35.411.770 "
        "[mindspore/core/ir/anf_extends.cc:66] fullname_with_scope] Input\n"
    )[0]
    assert (three.pid, three.pname, three.source) == (51545, "python", "mindspore/core/ir/anf_extends.cc:66")


def test_recent_err_msg_block_is_one_record() -> None:
    r = read_text((FIXTURES / "newer-wordings.log").read_text())
    block = next(x for x in r if x.line == 11)
    assert block.continued == 5
    assert block.pid == 1613532
    assert block.time == datetime(2026, 3, 24, 12, 14, 45, 885234)
    assert "allocate device memory failed" in block.text
    assert [x.line for x in r if 11 <= x.line <= 16] == [11]


def test_continuation_without_head_and_bounded_blocks() -> None:
    text = (
        "    orphan indented line: suspend pre check fail, hwts is busy\n"
        "[INFO] X(1,a):2020-01-01-00:00:00.000.000 y\n"
    )
    text += "    more\n" * 100
    r = read_text(text)
    assert r[0].line == 1 and classify(r[0].text, RULES) is not None
    assert r[1].continued == 64  # then the block is cut
    assert r[2].line == 67


def test_impossible_timestamp_is_none() -> None:
    r = read_text("[ERROR] DRV(1,a):2023-13-45-99:00:00.000.000 hwts is busy\n")
    assert r[0].time is None and r[0].pid == 1


def test_regexes_have_no_unbounded_repetition() -> None:
    """Every regex is linear: no *, +, or {m,} (only bounded counts and ?)."""

    def walk(parsed: sre_parse.SubPattern) -> None:
        for op, arg in parsed:
            if op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT):
                _lo, hi, sub = arg
                assert hi != sre_parse.MAXREPEAT, f"unbounded repetition in {rx}"
                walk(sub)
            elif op == sre_parse.SUBPATTERN:
                walk(arg[-1])
            elif op == sre_parse.BRANCH:
                for b in arg[1]:
                    walk(b)
            elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
                walk(arg[1])

    for rule in RULES:
        for p in rule.patterns:
            if p.regex:
                rx = p.regex
                walk(sre_parse.parse(rx))
                # Each regex starts with the needle or a literal, so it is only
                # tried where the needle's text is.
                assert re.match(r"[\w\[(]", rx)
    # The vendor codes' shapes too: each begins with a literal, which the
    # scanner's regex engine finds at C speed.
    for shape in SHAPES:
        rx = shape.regex("c")
        walk(sre_parse.parse(rx))
        assert re.match(r"(?:\(\?P<c>)?[A-Za-z]", rx), rx
        walk(sre_parse.parse(shape.strict.replace("{code}", shape.code)))
    # And the scans with the needles folded in, each a tree of literals behind its lead.
    for scan in window_search(needles(RULES)).scans:
        for rx in (scan.rx.pattern.decode(), scan.strict.pattern.decode()):
            walk(sre_parse.parse(rx))
        assert scan.rx.pattern.startswith(scan.shape.lead.encode())


def test_every_pattern_is_found_by_the_prefilter() -> None:
    for rule in RULES:
        assert rule.patterns
        for p in rule.patterns:
            assert any(n in p.needle for n in needles(RULES))


def test_pathological_megabyte_line_completes() -> None:
    # Every needle and half-wordings, repeated: the worst case for a naive regex.
    # Half codes and codes in the wrong place too: "ret is -80", "xEL0004", "error code is ".
    bits = [n[:-1] for n in needles(RULES)] + ["drvEventIdAlloc errorcode = ", "Device[" + "9" * 50,
                                               "ret is -80", "xEL0004", "error code is ", "E1234"]
    line = "[ERROR] RUNTIME(1,a):2023-05-29-17:53:11.569.804 " + "".join(bits) * 1
    line = (line * (1_000_000 // len(line) + 1))[:1_000_000]
    started = time.perf_counter()
    records = read_text(line + "\n" + "(" * 1_000_000 + "\n" + "EL0004 ret = 507033 " * 50_000 + "\n")
    for r in records:
        classify(r.text, RULES)
        name_record(r.text, RULES)
    assert len(records) == 3
    # No timing assertion: it completing is the test (a quadratic regex would not).
    assert time.perf_counter() - started >= 0


def test_readme_table_matches_catalog() -> None:
    text = FINDINGS_PAGE.read_text()
    start, end = "<!-- rules:start -->\n", "<!-- rules:end -->"
    assert start in text and end in text
    between = text[text.index(start) + len(start):text.index(end)]
    assert between == markdown_table(RULES)
    for rule in RULES:
        assert f"`{rule.id}`" in between


def test_findings_page_code_table_matches_the_data() -> None:
    text = FINDINGS_PAGE.read_text()
    start, end = "<!-- codes:start -->\n", "<!-- codes:end -->"
    assert start in text and end in text
    assert text[text.index(start) + len(start):text.index(end)] == codes_markdown_table()

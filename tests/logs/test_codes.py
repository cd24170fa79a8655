"""The vendor code table: its data, codes found by position, and ``logs --explain``."""

from __future__ import annotations

import json
import os
import re

import pytest
from helpers import FIXTURES
from helpers.runners import cli

from suspendguard.logs.codes import (
    MAX_MISSES,
    SHAPES,
    blocks,
    codes_in,
    normalise,
    table,
    window_scans,
    window_search,
)
from suspendguard.logs.journal import parse_journal
from suspendguard.logs.matching import needles
from suspendguard.logs.naming import name_record
from suspendguard.logs.reader import _Window, read_file
from suspendguard.logs.rules import BY_ID, RULES

LOGS = FIXTURES / "ascend-logs"


def printed(code: str) -> str:
    """The code as a failed line prints it: a token of its own, or a return code."""
    if code.startswith("E"):
        return f"{code}: [PID: 1] 2026-01-01-00:00:00.000.000 something failed."
    if code.startswith("-"):
        return f"dcmi get device info failed. ret is {code}"
    if code.startswith("0x"):
        return f"Setup:Alloc failed, stream_id=2047, retCode={code.upper().replace('0X', '0x')}."
    return f"RuntimeError: NPU function error: aclrtFoo, error code is {code}"


def test_every_block_cites_its_reference_and_every_code_is_whole() -> None:
    seen: set[str] = set()
    for block in blocks():
        assert block.codes, block.id
        # A link, but for the inner codes: they come from the same CANN troubleshooting
        # text (no address found) that rules.py cites for the resource wordings.
        assert "https://" in block.source or block.id == "runtime-inner", block.id
        for c in block.codes:
            assert c.code not in seen, c.code
            seen.add(c.code)
            assert c.name and c.meaning and c.handling, c.code
            assert c.rule is None or c.rule in BY_ID, (c.code, c.rule)
    assert len(table()) == len(seen)


def test_the_codes_operators_meet_first() -> None:
    rules = {code: table()[code].rule for code in
             ("EL0004", "EL0005", "EJ0001", "E30003", "207001", "207007", "207008", "207009",
              "507010", "507015", "507033", "507035", "-8012", "-8020")}
    assert rules == {
        "EL0004": "device-oom", "EL0005": "device-busy", "EJ0001": "device-held-by-previous-job",
        "E30003": "device-held-by-previous-job", "207001": "device-oom",
        "207007": "event-id-exhausted", "207008": "stream-exhausted",
        "207009": "notify-exhausted", "507010": "heartbeat-lost", "507015": "aicore-exception",
        "507033": "device-busy", "507035": "aicore-exception", "-8012": "device-busy",
        "-8020": "device-busy",
    }
    for not_ours in ("EZ9999", "EE1001", "107002", "507013", "-8005", "ERR00100", "ERR02200",
                     "500001", "561103", "200000"):
        assert table()[not_ours].rule is None, not_ours


@pytest.mark.parametrize("code", sorted(table()))
def test_every_code_is_found_where_it_is_printed_and_named_by_its_rule(code: str) -> None:
    line = printed(code)
    assert codes_in(line) == (code,)
    named = name_record(line, RULES)
    want = table()[code].rule
    assert (named.rule.id if named.rule else None) == want
    assert named.code == (code if want else None)
    assert named.unknown == ()  # a known code, ours or not, is never a note


@pytest.mark.parametrize("line, codes", [
    ("Memory_Allocation_Failure(EL0004): Failed to allocate memory.", ("EL0004",)),
    ("Alloc Event resource failed. ErrorCode=EE1023.", ("EE1023",)),
    ("rtEventRecord:ErrCode=507035, desc=[vector core exception]", ("507035",)),
    ("Malloc device memory failed, size[32], ret[207001], Device 6", ("207001",)),
    ("Call rtSetDevice, ret: 507033", ("507033",)),
    ("acl set device 0 failed, errorCode = 507033", ("507033",)),
    ("record event failed, runtime result = 507015[FUNC:ReportCallError]", ("507015",)),
    ("ERR02200 DIST call hccl api failed. EI0001: 2024-04-20", ("ERR02200", "EI0001")),
    # Numbers that are no return code, and tokens that only look like codes.
    ("Setup:stream created, stream_id=507033.", ()),
    ("secret=507033 interpret[207001]", ()),
    ("xEL0004 EL00045 0xE10001 add_E10001_kernel", ()),
    ("ret=0 ret = -1 ret is -80 error code is 5070331 runtime result = 2070010", ()),
    ("drvRetCode=7, retCode=0x26, retCode=0x70200190, InnerCode=0x7020019", ()),
    ("Failed to allocate event id, retCode=0x7020019.", ("0x7020019",)),
    ("c10_npu::acl::AclrtCreateStreamWithConfig, error code is 117571619", ("117571619",)),
])
def test_codes_are_found_by_position(line: str, codes: tuple[str, ...]) -> None:
    assert codes_in(line) == codes


def test_a_window_of_failing_matches_is_searched_by_the_strict_regex_alike() -> None:
    # Each failed match is a step in Python; after MAX_MISSES the lookbehind form takes
    # over, and must find what the fast form and its test find.
    text = ("xEL0004 arr = 507033 xret = 207001 (EL0005) ErrCode=507035 ret is -8020 "
            "error code is 507010 _E30003 " * (MAX_MISSES + 1)).encode()
    for scan in window_scans():
        fast, pos = [], 0
        while (m := scan.rx.search(text, pos)) is not None:
            i = m.start()
            if scan.shape.fits(None if i == 0 else text[i - 1], text[i + 1]):
                fast.append(i)
            pos = i + 1
        assert fast and [m.start() for m in scan.strict.finditer(text)] == fast
        found, i = [], scan.next_at(text, 0, len(text), 0)
        while i != -1:
            found.append(i)
            i = scan.next_at(text, 0, len(text), i + 1)
        assert found == fast


SAMPLES = (
    "xEL0004 arr = 507033 xret = 207001 (EL0005) ErrCode=507035 ret is -8020 ERR00100 ERR0010 "
    "error code is 507010 _E30003 ret[207001] retCode=0x7020019 retCode=0x70200190 ret: 507033 "
    "runtime result = 507015 Error code: 117571619 errorCode = 507033 error_code=207018 E12345x"
)


def test_the_window_forms_are_the_shapes_regexes() -> None:
    # The scan's tree is built from the forms; codes_in and the strict regex from the
    # template: both must find the same matches.
    for scan in window_scans():
        template = re.compile(scan.shape.regex().encode())
        for text in (SAMPLES.encode(), *(printed(c).encode() for c in table())):
            assert ([m.span() for m in scan.rx.finditer(text)]
                    == [m.span() for m in template.finditer(text)]), text


NOISE = "[INFO] RUNTIME(1,a):2026-01-01-00:00:00.000.000 [stream.cc:700]1 Setup:stream created."


@pytest.mark.parametrize("needle", needles(RULES))
def test_every_needle_is_found_whole_folded_or_not(needle: str) -> None:
    """A needle's line is a hit; the needle less its first or last character is not."""
    search = window_search(needles(RULES))
    lines = [NOISE, f"a {needle} b", f"a x{needle[1:]} b", f"a {needle[:-1]}x b", NOISE,
             "xEL0004 xret = 207001 " * (MAX_MISSES + 8), f"y{needle}"]  # the last after many misses: strict
    text = "\n".join(lines) + "\n"
    every = needles(RULES)
    starts = [text.index(line + "\n") for line in lines]
    want = [at for at, line in zip(starts, lines, strict=True)
            if any(n in line for n in every) or codes_in(line)]
    assert starts[1] in want and starts[-1] in want and starts[2] not in want
    window = _Window("t.log", RULES, None, None)
    for kind in (bytes, bytearray):
        assert window.heads(kind(text.encode()), 0, len(text)) == want, kind
    folded = needle not in search.rest
    assert folded == any(s.lead in needle[:-1] for s in SHAPES)


def test_a_wording_names_a_line_before_its_code() -> None:
    # MindSpore's 207001 behind "other processes occupying this card": a held device.
    held = ("Malloc device memory failed, size[32212254720], ret[207001], Device 6 may be other "
            "processes occupying this card, check as: ps -ef|grep python")
    assert (n := name_record(held, RULES).rule) is not None and n.id == "device-held-by-previous-job"
    # EE1023 is any resource shortage: the wording says which.
    stream = "Setup:Alloc Stream resource failed. Reason: Too many streams. ErrorCode=EE1023."
    assert (n := name_record(stream, RULES).rule) is not None and n.id == "stream-exhausted"
    # A block carrying two codes is named by the first rule in catalog order.
    block = "EL0004: Failed to allocate memory.\n    open device 2 failed, runtime result = 507033."
    named = name_record(block, RULES)
    assert named.rule is not None and (named.rule.id, named.code) == ("device-oom", "EL0004")


def test_unknown_codes_are_notes_only_in_failed_lines() -> None:
    failed = name_record("call aclnnFoo failed, error code is 561999", RULES)
    assert (failed.rule, failed.unknown) == (None, ("561999",))
    head = name_record("E39009: [PID: 1] 2026-01-01-00:00:00.000.000 The subprocess is gone.", RULES)
    assert (head.rule, head.unknown) == (None, ("E39009",))
    quiet = name_record("[INFO] GE(1,python):2026-01-01-00:00:00.000.000 ret = 599999 done", RULES)
    assert (quiet.rule, quiet.unknown) == (None, ())


def test_the_scanner_names_by_codes_and_keeps_unknown_codes_as_notes() -> None:
    fd = os.open(LOGS / "vendor-codes.log", os.O_RDONLY)
    try:
        result = read_file(fd, "vendor-codes.log", 1 << 20)
    finally:
        os.close(fd)
    assert [(f.line, f.rule, f.code) for f in result.findings] == [
        (1, "device-oom", "EL0004"), (2, "device-oom", "207001"),
        (5, "aicore-exception", "507035"), (16, "device-oom", None),
        (20, "device-busy", "507033"),
    ]
    assert [(u.line, u.code) for u in result.unknown_codes] == [(17, "EE8888")]


def test_logs_verbose_shows_unrecognised_codes_and_they_never_count() -> None:
    path = str(LOGS / "vendor-codes.log")
    code, out, _ = cli("logs", path)
    assert code == 1 and "unrecognised vendor code" not in out
    assert "vendor code(s): 207001, EL0004" in out
    code, out, _ = cli("logs", path, "--verbose")
    assert code == 1
    assert "vendor-codes.log:17: unrecognised vendor code EE8888: " in out
    code, out, _ = cli("logs", path, "--json")
    doc = json.loads(out)
    assert [u["code"] for u in doc["unrecognised_vendor_codes"]] == ["EE8888"]
    assert {f["code"] for f in doc["findings"]} == {"EL0004", "207001", "507035", None, "507033"}


def test_a_unit_journal_is_named_by_codes_too() -> None:
    lines = [
        "(EngineCore_DP0 pid=553) EL0004: [PID: 553] 2025-09-17-04:55:13.065.712 Failed to "
        "allocate memory.",
        "[ERROR] 2025-09-17-04:55:13 (PID:553, Device:0, RankID:-1) ERR00100 PTA call acl api "
        "failed",
    ]
    text = "\n".join(json.dumps({"_PID": "553", "__REALTIME_TIMESTAMP": "1700000000000000",
                                 "MESSAGE": m}) for m in lines)
    findings, entries, _ = parse_journal(text, "job.service")
    assert entries == 2
    assert [(f.rule, f.code, f.line) for f in findings] == [("device-oom", "EL0004", 1)]


def test_a_file_of_notes_only_exits_zero(tmp_path: os.PathLike[str]) -> None:
    log = os.path.join(tmp_path, "plog-1.log")
    with open(log, "w") as f:
        f.write("[ERROR] RUNTIME(1,a):2026-01-01-00:00:00.000.000 x failed, error code is 561999\n"
                "dcmi module initialize failed. ret is -8005\n")
    code, out, _ = cli("logs", log, "--verbose")
    assert code == 0 and "No documented failure found." in out
    assert "unrecognised vendor code 561999" in out and "-8005" not in out


@pytest.mark.parametrize("code", sorted(table()))
def test_explain_answers_for_every_code_in_the_table(code: str) -> None:
    status, out, err = cli("logs", "--explain", code)
    assert (status, err) == (0, "")
    known = table()[code]
    assert out.startswith(f"{code}: {known.name} ")
    assert f"vendor's meaning: {known.meaning}" in out
    if known.rule:
        assert f"catalog rule: {known.rule} ({BY_ID[known.rule].severity})" in out
        assert f"what to do: {BY_ID[known.rule].remedy}" in out
    else:
        assert "not a suspend failure" in out and f"what to do: {known.handling}" in out
    assert "reference: " in out


def test_explain_takes_a_code_as_pasted_and_says_when_it_does_not_know() -> None:
    for pasted, key in (("el0004", "EL0004"), (" 507033 ", "507033"), ("ret is -8020", "-8020"),
                        ("err00100", "ERR00100"), ("0X702001B", "0x702001b")):
        assert normalise(pasted) == key
        status, out, _ = cli("logs", "--explain", pasted)
        assert status == 0 and out.startswith(f"{key}: ")
    status, out, _ = cli("logs", "--explain", "E39009")
    assert status == 1 and out.startswith("E39009: not in the vendor code table (")
    status, out, _ = cli("logs", "--explain", "-8020", "--json")
    doc = json.loads(out)
    assert status == 0 and (doc["rule"], doc["suspend_failure"]) == ("device-busy", True)
    status, out, _ = cli("logs", "--explain", "nonsense", "--json")
    assert status == 1 and json.loads(out) == {"code": "nonsense", "known": False}


def test_explain_of_no_code_is_a_usage_error() -> None:
    # Not ": not in the vendor code table" (exit 1), which names nothing.
    for given in ("", "  "):
        status, out, err = cli("logs", "--explain", given)
        assert status == 2 and out == ""
        assert err == f"suspendguard: --explain {given!r}: expected a vendor code such as " \
            "EL0004, 507033 or -8020\n"


def test_explain_reads_no_log() -> None:
    status, out, err = cli("logs", "--explain", "EL0004", str(LOGS))
    assert status == 2 and out == ""
    assert re.fullmatch(r"suspendguard: --explain CODE reads no log: .*\n", err)

"""The frameworks' wordings (torch_npu, MindSpore, vLLM, CANN) and the ``Name(CODE): text`` form."""

from __future__ import annotations

import os
from datetime import datetime

import pytest
from helpers import FIXTURES

from suspendguard.logs.after import AfterResult
from suspendguard.logs.codes import table
from suspendguard.logs.entries import read_text
from suspendguard.logs.finding import Finding
from suspendguard.logs.journal import parse_journal
from suspendguard.logs.named import UNLISTED, named_forms
from suspendguard.logs.naming import name_record
from suspendguard.logs.reader import read_file
from suspendguard.logs.rules import BY_ID, RULES

LOGS = FIXTURES / "ascend-logs"


def record(name: str, line: int) -> str:
    return next(r.text for r in read_text((LOGS / name).read_text(), name) if r.line == line)


# (file, line) -> (rule, the code that named it). Sources in SOURCES.md.
NAMED = {
    ("framework-wordings.log", 1): ("device-oom", None),  # torch_npu OutOfMemoryError
    ("framework-wordings.log", 2): ("device-oom", None),  # MindSpore Out of Memory!!!
    ("framework-wordings.log", 3): ("device-oom", None),  # vLLM: no memory for cache blocks
    ("framework-wordings.log", 4): ("device-oom", "EL0004"),
    ("framework-wordings.log", 5): ("stream-exhausted", "207008"),  # error code is 207008
    ("framework-wordings.log", 6): ("stream-exhausted", None),  # [Error]: Stream resources ...
    ("framework-wordings.log", 7): ("stream-exhausted", "EL0009"),
    ("framework-wordings.log", 9): ("stream-exhausted", "0x7020023"),  # Alloc sq cq fail
    ("framework-wordings.log", 10): ("stream-exhausted", None),  # error=117571619
    ("framework-formats.log", 1): ("device-task-abort", "107022"),  # FORCE STOP
    ("framework-formats.log", 3): ("device-task-abort", None),
    ("framework-formats.log", 4): ("device-memory-fault", "507053"),  # UCE ERROR
    ("framework-formats.log", 6): ("device-memory-fault", None),  # HBM MULTI BIT ECC ERROR
    ("framework-formats.log", 8): ("device-memory-fault", "507053"),  # the code alone
    ("framework-formats.log", 9): ("device-oom", None),
    ("framework-formats.log", 10): ("stream-exhausted", None),  # vllm-ascend's guidance
}


@pytest.mark.parametrize(("name", "line"), sorted(NAMED))
def test_framework_wording_is_named(name: str, line: int) -> None:
    named = name_record(record(name, line), RULES)
    assert named.rule is not None
    assert (named.rule.id, named.code) == NAMED[name, line]
    assert named.described is None  # a rule of the catalog says what it means


def test_categories_have_remedies() -> None:
    for rule_id in ("device-oom", "stream-exhausted", "device-task-abort", "device-memory-fault"):
        rule = BY_ID[rule_id]
        assert rule.severity == "error" and rule.remedy and rule.meaning
    assert "npu-smi info" in BY_ID["device-oom"].remedy  # framework jobs: memory held by another
    assert "restart the job" in BY_ID["device-task-abort"].remedy


def test_device_abnormal_codes_name_their_rules() -> None:
    known = table()
    assert known["107022"].rule == "device-task-abort"
    assert {known[c].rule for c in ("507053", "507054", "507055")} == {"device-memory-fault"}
    # A bare code, no wording: the reference names it.
    line = "RuntimeError: NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is 507054"
    assert (n := name_record(line, RULES).rule) is not None and n.id == "device-memory-fault"


def test_force_stop_only_as_torch_npu_throws_it() -> None:
    for quiet in ("Force stop app", "the user pressed FORCE STOP in the menu",
                  "UCE ERRORS are counted", "NPU function error: aclrtSynchronizeStream"):
        assert name_record(quiet, RULES).rule is None, quiet
    assert (n := name_record("NPU function error: FORCE STOP", RULES).rule) is not None
    assert n.id == "device-task-abort"


def test_out_of_memory_outranks_the_stop_it_causes() -> None:
    block = ("RuntimeError: NPU function error:  FORCE STOP, error code is 107022\n"
             "    [Error]: The memory on the device is exhausted.")
    named = name_record(block, RULES)
    assert named.rule is not None and named.rule.id == "device-oom"


def test_unlisted_name_code_text_is_described() -> None:
    named = name_record(record("framework-formats.log", 11), RULES)
    assert named.rule is UNLISTED and named.code == "207099"
    assert named.described == ("something (ACL_ERROR_RT_SOMETHING, code 207099, not in the "
                               "vendor reference): some text")
    e_code = name_record(record("framework-formats.log", 12), RULES)
    assert e_code.rule is UNLISTED and e_code.code == "EL0099"
    assert e_code.described is not None
    assert e_code.described.startswith("Device Reset Pending (Device_Reset_Pending, code EL0099")
    assert e_code.described.endswith("): The device is being reset by the driver.")


def test_the_reference_wins_over_the_name() -> None:
    # 107022 is in the table, with a rule: that rule, not an unlisted finding.
    abort = name_record(record("framework-formats.log", 13), RULES)
    assert abort.rule is not None and abort.rule.id == "device-task-abort"
    assert (abort.code, abort.described) == ("107022", None)
    # Known, not ours: no finding at all, whatever the name says.
    for line in (14,):
        assert name_record(record("framework-formats.log", line), RULES).rule is None
    ee1001 = name_record(record("framework-wordings.log", 11), RULES)
    assert (ee1001.rule, ee1001.unknown) == (None, ())
    # A known code of the table keeps its own rule even in an unlisted name's clothes.
    oom = name_record("[ERROR] APP(1,a):2026-01-01-00:00:00.000.000 Totally_New_Name(207001): "
                      "something else", RULES)
    assert oom.rule is not None and (oom.rule.id, oom.code) == ("device-oom", "207001")


def test_named_form_needs_a_name_and_a_code_shape() -> None:
    assert named_forms("(EE9999):  [SqCqManage]Alloc sq cq fail") == ()  # no name before it
    assert named_forms("aclmdlRICaptureBegin(capture_stream_, capture_mode)") == ()
    assert named_forms("Foo(207099): x") == ()  # a name without an underscore
    assert named_forms("A_B(2070991): x") == ()  # seven digits: no code
    (form,) = named_forms("x Memory_Allocation_Failure(EL0004): Failed to allocate memory."
                          "[FUNC:Init][FILE:a.cc]")
    assert (form.name, form.code, form.text) == (
        "Memory_Allocation_Failure", "EL0004", "Failed to allocate memory.")
    (hexed,) = named_forms("Inner_Thing(0x7A1B2C3): text")
    assert hexed.code == "0x7a1b2c3"


def test_unlisted_names_are_findings_in_files_and_journals() -> None:
    path = LOGS / "framework-formats.log"
    fd = os.open(path, os.O_RDONLY)
    try:
        result = read_file(fd, path.name, 1 << 20)
    finally:
        os.close(fd)
    unlisted = [f for f in result.findings if f.rule == UNLISTED.id]
    assert [(f.line, f.code) for f in unlisted] == [(11, "207099"), (12, "EL0099")]
    assert unlisted[0].described is not None and unlisted[0].described.endswith(": some text")
    assert unlisted[0].severity == "warning"
    assert not result.unknown_codes  # described findings, no longer bare notes
    doc = Finding.from_json(unlisted[0].to_json())
    assert doc == unlisted[0]
    journal = ('{"MESSAGE": "ACL_ERROR_RT_SOMETHING(207099): some text", "_PID": "7", '
               '"__REALTIME_TIMESTAMP": "1700000000000000"}\n')
    findings, _, _ = parse_journal(journal, "job.service", RULES)
    assert [(f.rule, f.code) for f in findings] == [(UNLISTED.id, "207099")]
    assert findings[0].described == unlisted[0].described


def test_after_resume_line_quotes_the_description() -> None:
    f = Finding(UNLISTED.id, "warning", "/x.log", 1, datetime(2026, 1, 1), None,
                "ACL_ERROR_RT_SOMETHING(207099): some text", code="207099",
                described="something (ACL_ERROR_RT_SOMETHING, code 207099, not in the vendor "
                          "reference): some text")
    (line,) = AfterResult((f,)).journal_lines(3)
    assert "'something (ACL_ERROR_RT_SOMETHING, code 207099, not in the vendor reference): " \
           "some text' (unlisted-named-failure)" in line
    oom = Finding("device-oom", "error", "/x.log", 2, None, None, "NPU out of memory")
    (plain,) = AfterResult((oom,)).journal_lines(3)
    assert "'out of memory' (device-oom)" in plain


def test_unlisted_rule_is_last() -> None:
    # A wording of any other rule names a record first; the unlisted form comes after the table.
    assert RULES[-1] is UNLISTED

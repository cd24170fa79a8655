"""Failures that name themselves: ``Name(CODE): text``, with a code the reference lacks.

CANN prints its errors as a name, the code in parentheses, and a sentence:
``Memory_Allocation_Failure(EL0004): Failed to allocate memory.`` (hw-native-sys/PTOAS
PR 341), ``Insufficient_Stream_Resources(EL0009): The stream resources are insufficient.``
(vllm-ascend issue 9691), ``Invalid_Argument(EE1001): The argument is invalid.`` (PTOAS PR
1037). A code of that form that the vendor code table (data/vendor-codes.toml) lacks still
says what failed, in its name and its text: the finding is built from them, and marked as
not in the reference. A code the table has is named by the table, as everywhere else.

The form is found from its parenthesis on, one regex with a literal first character; the
name is read back from there within a bounded window, so a line costs one pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from suspendguard.logs.matching import WARNING, Rule, needle

# The code in parentheses, then a colon: an E code, a torch_npu code, an aclError or
# rtError return code, or a runtime inner code, as codes.py reads them.
_FORM = re.compile(
    r"\((?P<code>E[0-9A-Z][0-9]{4}|ERR[0-9]{5}|[1-5][0-9]{5}|0x[0-9a-fA-F]{7})\): ?"
    r"(?P<text>[^\n]{0,300})"
)
MAX_NAME = 64
# The name: a word with an underscore in it (Memory_Allocation_Failure,
# ACL_ERROR_RT_MEMORY_ALLOCATION), right before the parenthesis.
_NAME = re.compile(r"(?<![0-9A-Za-z_])[A-Za-z][0-9A-Za-z]{0,62}_[0-9A-Za-z_]{1,62}$")
_ACL_PREFIXES = ("ACL_ERROR_RT_", "ACL_ERROR_")
MAX_FORMS = 16

UNLISTED = Rule(
    id="unlisted-named-failure",
    severity=WARNING,
    quote="Name(CODE): text",
    summary="a failure whose code the vendor reference does not list, in its own words",
    meaning=(
        "A line reported a failure in CANN's `Name(CODE): text` form (as "
        "`Memory_Allocation_Failure(EL0004): Failed to allocate memory.`) with a code that is "
        "not in the vendor code table. Its name and its text are all that say what failed: "
        "the finding is described by them, marked as not in the reference."
    ),
    remedy=(
        "Read the name and the text, and the lines around the line; if the failure comes "
        "back after resumes, report the line so that the code table learns the code."
    ),
    patterns=(
        # The numeric codes of the form are not code-shaped to the scanner ("(207001):"
        # is no "ret" or "error code" form), so AscendCL's names find such lines; the
        # E codes are found by their own shape.
        needle("ACL_ERROR_"),
    ),
)


@dataclass(frozen=True, slots=True)
class NamedForm:
    """One ``Name(CODE): text`` of a line."""

    name: str
    code: str
    text: str

    def what(self) -> str:
        """The name in words: ``ACL_ERROR_RT_STREAM_ABORT`` -> ``stream abort``."""
        name = self.name
        for prefix in _ACL_PREFIXES:
            if name.startswith(prefix) and len(name) > len(prefix):
                name = name[len(prefix):]
                break
        words = name.replace("_", " ").strip()
        return words.lower() if words.isupper() else words

    def describe(self) -> str:
        head = f"{self.what()} ({self.name}, code {self.code}, not in the vendor reference)"
        return f"{head}: {self.text}" if self.text else head


def _text(raw: str) -> str:
    # The runtime's "[FUNC:...][FILE:...]" trailer says where, not what.
    cut = raw.find("[FUNC:")
    return (raw if cut == -1 else raw[:cut]).strip()


def named_forms(text: str) -> tuple[NamedForm, ...]:
    """Every ``Name(CODE): text`` of a record, in order (at most MAX_FORMS)."""
    found: list[NamedForm] = []
    for m in _FORM.finditer(text):
        start = m.start()
        name = _NAME.search(text, max(0, start - MAX_NAME), start)
        if name is None:
            continue
        code = m["code"]
        found.append(NamedForm(name.group(0), code.lower() if code.startswith("0x") else code,
                               _text(m["text"])))
        if len(found) >= MAX_FORMS:
            break
    return tuple(found)

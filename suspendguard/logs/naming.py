"""What names a record: a wording of the catalog, a code of the reference, or the message's own name.

A wording names a record first, as it is the more specific: ``ErrorCode=EE1023``
is any resource shortage and the wording says which, and MindSpore's
"ret[207001] ... other processes occupying this card" is a held device, not a
full one. Then the first rule (catalog order) of the known codes the record
carries, those of its ``Name(CODE): text`` forms (``named``) included: the
reference wins, and a code known but not ours names nothing. Then a
``Name(CODE): text`` whose code the reference lacks: a finding of the
catalog's ``unlisted-named-failure`` rule, described by its name and text.
Codes not in the table are returned, from a line that says it failed, for
``logs --verbose``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from suspendguard.logs.codes import codes_in, table
from suspendguard.logs.matching import Rule, classify
from suspendguard.logs.named import UNLISTED, named_forms

# A line that says it failed: only there is an unknown code worth a note.
_ERRORISH = r"(?i)error|fail|exception|\bE[0-9A-Z][0-9]{4}:"


@dataclass(frozen=True, slots=True)
class Naming:
    """What a record is named by: a rule (and the code that named it), or unknown codes to note.

    ``described``: what failed, in the record's own words, where the reference
    does not say (an ``unlisted-named-failure``).
    """

    rule: Rule | None
    code: str | None = None
    unknown: tuple[str, ...] = ()
    described: str | None = None


def name_record(text: str, rules: Sequence[Rule]) -> Naming:
    """The rule a record is named by (see the module), or the unknown codes to note."""
    rule = classify(text, rules)
    if rule is not None and rule.id == UNLISTED.id:
        rule = None  # its needle only finds the record: the reference comes first
    found = codes_in(text)
    if rule is not None:
        if not found:
            return Naming(rule)
        known = table()
        return Naming(rule, next((c for c in found if c in known and known[c].rule == rule.id), None))
    forms = named_forms(text)
    found = tuple(dict.fromkeys((*found, *(f.code for f in forms))))
    if not found:
        return Naming(None)
    known = table()
    order = {r.id: i for i, r in enumerate(rules)}
    # The earliest rule in catalog order; among its codes, the first in the line.
    named = [(order[known[c].rule or ""], at, c) for at, c in enumerate(found)
             if c in known and (known[c].rule or "") in order]
    if named:
        first = min(named)
        return Naming(rules[first[0]], first[2])
    unlisted = next((f for f in forms if f.code not in known), None)
    if unlisted is not None and UNLISTED.id in order:
        return Naming(rules[order[UNLISTED.id]], unlisted.code, described=unlisted.describe())
    unknown = tuple(c for c in found if c not in known)
    if unknown and re.search(_ERRORISH, text[:4096]):
        return Naming(None, None, unknown)
    return Naming(None)

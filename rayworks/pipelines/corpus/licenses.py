"""License evidence -> SPDX id and open/closed class, for the corpus's provenance columns.

Common Corpus's selling point is that every document carries its own license or
public-domain evidence (the paper; the dataset card of `PleIAs/common_corpus`). Our offline
sources are installed Python distributions (`*.dist-info/METADATA`) and Debian
`/usr/share/doc/*/copyright` files. Every answer is a `LicenseEvidence` holding the exact
field or line it came from, so the datasheet can show why a document was judged open.

Rules, chosen so that a wrong answer errs towards "not open" (a false "open" would put
restricted text in the open output; a false "closed" only costs a document):
- Known names map to SPDX ids (aliases: Debian short names like `GPL-2+` and `Expat`,
  PyPI free text like "MIT License", trove classifiers). A name that says the family but
  not the exact license ("BSD License", "Apache Software License") gets its status with
  `spdx=None`: the class is certain, the id would be a guess.
- Unknown names give status "unknown" with the raw text as evidence, never a guess.
- SPDX expressions: `A AND B` takes the most restrictive part (unknown if any part is
  unknown); `A OR B` the most open known part (the licensee may choose); `WITH exception`
  keeps the base license's status. Debian's lower-case `and`/`or` are accepted.
- Several license classifiers combine with AND (conservative: whether they mean a choice is
  not stated). Debian free text (non-DEP-5) is a keyword search marked confidence "low".
`is_open` passes public-domain and permissive only; the pipeline keeps copyleft, proprietary
and unknown aside (counted, never silently dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import Literal

Status = Literal["public-domain", "permissive", "copyleft", "proprietary", "unknown"]
PUBLIC_DOMAIN = "LicenseRef-Public-Domain"
"""SPDX has no id for the public domain; this is its `LicenseRef-` form."""

OPEN_STATUSES = ("public-domain", "permissive")
_RANK = {"public-domain": 0, "permissive": 1, "copyleft": 2, "proprietary": 3}

_STATUS: dict[str, Status] = {
    PUBLIC_DOMAIN: "public-domain",
    "CC0-1.0": "public-domain",
    "Unlicense": "public-domain",
    "MIT": "permissive",
    "MIT-0": "permissive",
    "0BSD": "permissive",
    "BSD-2-Clause": "permissive",
    "BSD-3-Clause": "permissive",
    "Apache-2.0": "permissive",
    "ISC": "permissive",
    "PSF-2.0": "permissive",
    "Python-2.0": "permissive",
    "Zlib": "permissive",
    "BSL-1.0": "permissive",
    "CC-BY-4.0": "permissive",
    "CC-BY-3.0": "permissive",
    "X11": "permissive",
    "HPND": "permissive",
    "MPL-2.0": "copyleft",
    "EPL-2.0": "copyleft",
    "CC-BY-SA-4.0": "copyleft",
    "LGPL-2.0-only": "copyleft",
    "LGPL-2.0-or-later": "copyleft",
    "LGPL-2.1-only": "copyleft",
    "LGPL-2.1-or-later": "copyleft",
    "LGPL-3.0-only": "copyleft",
    "LGPL-3.0-or-later": "copyleft",
    "GPL-1.0-or-later": "copyleft",
    "GPL-2.0-only": "copyleft",
    "GPL-2.0-or-later": "copyleft",
    "GPL-3.0-only": "copyleft",
    "GPL-3.0-or-later": "copyleft",
    "AGPL-3.0-only": "copyleft",
    "AGPL-3.0-or-later": "copyleft",
    "LicenseRef-Proprietary": "proprietary",
}

# Lower-cased alias -> SPDX id (or None for a family whose exact id is not stated).
_ALIASES: dict[str, str | None] = {k.lower(): k for k in _STATUS}
_ALIASES.update(
    {
        "public-domain": PUBLIC_DOMAIN,
        "public domain": PUBLIC_DOMAIN,
        "pd": PUBLIC_DOMAIN,
        "cc0": "CC0-1.0",
        "the unlicense": "Unlicense",
        "unlicense": "Unlicense",
        "expat": "MIT",
        "mit license": "MIT",
        "the mit license": "MIT",
        "mit-style": None,
        "bsd-2-clause": "BSD-2-Clause",
        "bsd-3-clause": "BSD-3-Clause",
        "bsd": None,
        "new bsd": "BSD-3-Clause",
        "new bsd license": "BSD-3-Clause",
        "bsd license": None,
        "simplified bsd": "BSD-2-Clause",
        "modified bsd license": "BSD-3-Clause",
        "3-clause bsd license": "BSD-3-Clause",
        "2-clause bsd license": "BSD-2-Clause",
        "apache 2.0": "Apache-2.0",
        "apache-2": "Apache-2.0",
        "apache 2": "Apache-2.0",
        "apache license 2.0": "Apache-2.0",
        "apache license, version 2.0": "Apache-2.0",
        "apache software license": None,
        "isc license": "ISC",
        "isc license (iscl)": "ISC",
        "psf": "PSF-2.0",
        "psf license": "PSF-2.0",
        "python software foundation license": "PSF-2.0",
        "mpl-2.0": "MPL-2.0",
        "mpl 2.0": "MPL-2.0",
        "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
        "gpl-2": "GPL-2.0-only",
        "gpl-2+": "GPL-2.0-or-later",
        "gpl-2.0": "GPL-2.0-only",
        "gpl-2.0+": "GPL-2.0-or-later",
        "gpl-3": "GPL-3.0-only",
        "gpl-3+": "GPL-3.0-or-later",
        "gpl-3.0": "GPL-3.0-only",
        "gpl-3.0+": "GPL-3.0-or-later",
        "gpl-1+": "GPL-1.0-or-later",
        "gplv2": "GPL-2.0-only",
        "gplv2+": "GPL-2.0-or-later",
        "gplv3": "GPL-3.0-only",
        "gplv3+": "GPL-3.0-or-later",
        "gpl": None,
        "lgpl-2": "LGPL-2.0-only",
        "lgpl-2+": "LGPL-2.0-or-later",
        "lgpl-2.1": "LGPL-2.1-only",
        "lgpl-2.1+": "LGPL-2.1-or-later",
        "lgpl-3": "LGPL-3.0-only",
        "lgpl-3+": "LGPL-3.0-or-later",
        "lgpl-3.0": "LGPL-3.0-only",
        "lgpl-3.0+": "LGPL-3.0-or-later",
        "lgpl": None,
        "agpl-3": "AGPL-3.0-only",
        "agpl-3+": "AGPL-3.0-or-later",
        "agpl-3.0": "AGPL-3.0-only",
        "cc-by-4": "CC-BY-4.0",
        "cc-by-sa-4": "CC-BY-SA-4.0",
        "zlib license": "Zlib",
        "proprietary": "LicenseRef-Proprietary",
        "other/proprietary license": "LicenseRef-Proprietary",
    }
)

# Status of id-less families (alias -> None above).
_FAMILY_STATUS: dict[str, Status] = {
    "mit-style": "permissive",
    "bsd": "permissive",
    "bsd license": "permissive",
    "apache software license": "permissive",
    "gpl": "copyleft",
    "lgpl": "copyleft",
}

# Trove classifier tail ("License :: OSI Approved :: <tail>") -> SPDX id or family alias.
_CLASSIFIERS: dict[str, str] = {
    "MIT License": "MIT",
    "MIT No Attribution License (MIT-0)": "MIT-0",
    "BSD License": "bsd license",
    "Apache Software License": "apache software license",
    "ISC License (ISCL)": "ISC",
    "Python Software Foundation License": "PSF-2.0",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "The Unlicense (Unlicense)": "Unlicense",
    "GNU General Public License (GPL)": "gpl",
    "GNU General Public License v2 (GPLv2)": "gpl",
    "GNU General Public License v3 (GPLv3)": "gpl",
    "GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "GNU Lesser General Public License v2 or later (LGPLv2+)": "LGPL-2.0-or-later",
    "GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "GNU Lesser General Public License v3 (LGPLv3)": "lgpl",
    "GNU Library or Lesser General Public License (LGPL)": "lgpl",
    "GNU Affero General Public License v3": "AGPL-3.0-only",
    "GNU Affero General Public License v3 or later (AGPLv3+)": "AGPL-3.0-or-later",
    "Public Domain": PUBLIC_DOMAIN,
    "CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
    "Other/Proprietary License": "LicenseRef-Proprietary",
}


@dataclass(frozen=True)
class LicenseEvidence:
    """A license judgement with its provenance.

    spdx: SPDX id or expression; None when unknown or when only the family is stated.
    status: public-domain | permissive | copyleft | proprietary | unknown.
    evidence: the exact field or line the judgement came from (raw text when unknown).
    source: where that text was read (a METADATA or copyright file path, or a label).
    confidence: "high" for declared fields, "low" for free-text keyword matches.
    """

    spdx: str | None
    status: Status
    evidence: str
    source: str
    confidence: Literal["high", "low"] = "high"


def is_open(evidence: LicenseEvidence) -> bool:
    """True for public-domain and permissive licenses only (the open output)."""
    return evidence.status in OPEN_STATUSES


def classify_name(name: str) -> tuple[str | None, Status]:
    """One license name (SPDX id, Debian short name, PyPI free text) -> (SPDX id, status)."""
    key = " ".join(name.strip().lower().split())
    if key not in _ALIASES:
        return None, "unknown"
    spdx = _ALIASES[key]
    return spdx, (_STATUS[spdx] if spdx else _FAMILY_STATUS[key])


def _combine(parts: list[tuple[str | None, Status]], op: str) -> tuple[str | None, Status]:
    ids = [spdx for spdx, _ in parts]
    spdx = f" {op} ".join(f"({i})" if " " in i else i for i in ids) if all(ids) else None
    known = [status for _, status in parts if status != "unknown"]
    if op == "AND":
        status = max(known, key=_RANK.__getitem__) if len(known) == len(parts) else "unknown"
    else:
        status = min(known, key=_RANK.__getitem__) if known else "unknown"
    return spdx, status


def classify_expression(expr: str) -> tuple[str | None, Status]:
    """An SPDX-style expression (AND/OR/WITH, parentheses, any case) -> (SPDX, status).

    Raises ValueError on unbalanced parentheses or a dangling operator.
    """
    tokens = [t for t in re.findall(r"\(|\)|[^\s(),]+", expr)]
    pos = 0

    def peek() -> str | None:
        return tokens[pos].upper() if pos < len(tokens) else None

    def parse(op: str) -> tuple[str | None, Status]:
        nonlocal pos
        sub = "AND" if op == "OR" else None
        parts = [parse(sub) if sub else atom()]
        while peek() == op:
            pos += 1
            parts.append(parse(sub) if sub else atom())
        return parts[0] if len(parts) == 1 else _combine(parts, op)

    def atom() -> tuple[str | None, Status]:
        nonlocal pos
        if pos >= len(tokens) or peek() in ("AND", "OR", "WITH", ")"):
            raise ValueError(f"license expression {expr!r}: expected a license at token {pos}")
        if tokens[pos] == "(":
            pos += 1
            result = parse("OR")
            if peek() != ")":
                raise ValueError(f"license expression {expr!r}: unbalanced parentheses")
            pos += 1
            return result
        spdx, status = classify_name(tokens[pos])
        pos += 1
        if peek() == "WITH" and pos + 1 < len(tokens):
            exception = tokens[pos + 1]
            pos += 2
            spdx = f"{spdx} WITH {exception}" if spdx else None
        return spdx, status

    result = parse("OR")
    if pos != len(tokens):
        raise ValueError(f"license expression {expr!r}: unexpected {tokens[pos]!r}")
    return result


def _classify_text(text: str) -> tuple[str | None, Status]:
    """A whole name first ("MIT License"), then as an expression; unknown if neither parses."""
    spdx, status = classify_name(text)
    if status != "unknown":
        return spdx, status
    try:
        return classify_expression(text)
    except ValueError:
        return None, "unknown"


# --- Python distributions: *.dist-info/METADATA (core metadata 2.x) ---------------------


def _from_classifiers(lines: list[str]) -> tuple[str | None, Status]:
    parts = []
    for line in lines:
        tail = line.split("::")[-1].strip()
        name = _CLASSIFIERS.get(tail)
        parts.append(classify_name(name) if name else (None, "unknown"))
    return parts[0] if len(parts) == 1 else _combine(parts, "AND")


def from_metadata(text: str, source: str = "METADATA") -> LicenseEvidence:
    """License of a Python distribution from its METADATA text.

    Order (most precise first): `License-Expression:` (PEP 639, authoritative even when
    unknown), then the first line of `License:` when it names a known license, then the
    `Classifier: License :: ...` lines (combined with AND); otherwise "unknown".
    """
    headers = HeaderParser().parsestr(text)
    expression = (headers.get("License-Expression") or "").strip()
    if expression:
        spdx, status = _classify_text(expression)
        return LicenseEvidence(spdx, status, f"License-Expression: {expression}", source)
    license_field = (headers.get("License") or "").strip().splitlines()
    first = license_field[0].strip() if license_field else ""
    first = "" if first == "UNKNOWN" else first  # setuptools' placeholder for "not given"
    if first:
        spdx, status = _classify_text(first)
        if status != "unknown":
            return LicenseEvidence(spdx, status, f"License: {first}", source)
    classifiers = [
        c.strip() for c in headers.get_all("Classifier") or [] if c.startswith("License ::")
    ]
    classifiers = [c for c in classifiers if c != "License :: OSI Approved"]
    if classifiers:
        spdx, status = _from_classifiers(classifiers)
        if status != "unknown" or not first:
            return LicenseEvidence(
                spdx, status, "; ".join(f"Classifier: {c}" for c in classifiers), source
            )
    raw = f"License: {first}" if first else "no License-Expression, License or license Classifier"
    return LicenseEvidence(None, "unknown", raw, source)


# --- Debian: /usr/share/doc/<package>/copyright ------------------------------------------


def parse_dep5(text: str) -> list[dict[str, str]]:
    """Stanzas of a DEP-5 (machine-readable copyright 1.0) file: field name (lower-case) ->
    value, continuation lines joined with newlines. Stanzas are separated by blank lines."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, name = {}, None
        elif line[0] in " \t" and name:
            current[name] += "\n" + line.strip()
        elif ":" in line and not line.startswith("#"):
            field, value = line.split(":", 1)
            name = field.strip().lower()
            current[name] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def from_debian_copyright(text: str, source: str = "debian/copyright") -> LicenseEvidence:
    """License of a Debian package from its copyright file.

    DEP-5: the first line of `License:` in the `Files: *` stanza (the package's default),
    else the header stanza's `License:`. Other files: `from_free_text` (confidence "low").
    """
    if not text.startswith("Format:"):
        return from_free_text(text, source)
    stanzas = parse_dep5(text)
    for stanza in stanzas:
        if "*" in stanza.get("files", "").split() and stanza.get("license"):
            first = stanza["license"].splitlines()[0].strip()
            spdx, status = _classify_text(first)
            return LicenseEvidence(spdx, status, f"Files: * / License: {first}", source)
    if stanzas and stanzas[0].get("license"):
        first = stanzas[0]["license"].splitlines()[0].strip()
        spdx, status = _classify_text(first)
        return LicenseEvidence(spdx, status, f"header License: {first}", source)
    return LicenseEvidence(None, "unknown", "DEP-5 file without a Files: * License", source)


_GNU = re.compile(r"GNU (Affero |Library |Lesser )?General Public License")
_KEYWORDS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"Apache License,? Version 2\.0", re.I), "Apache-2.0"),
    (re.compile(r"Permission is hereby granted, free of charge", re.I), "MIT"),
    (re.compile(r"Redistribution and use in source and binary forms", re.I), "bsd"),
    (re.compile(r"Python Software Foundation License|PSF License", re.I), "PSF-2.0"),
    (re.compile(r"public domain", re.I), PUBLIC_DOMAIN),
]


def _gnu_name(match: re.Match, text: str) -> str:
    """GPL/LGPL/AGPL id from the version wording within 300 characters of the name."""
    kind = {None: "gpl", "Affero ": "agpl", "Library ": "lgpl", "Lesser ": "lgpl"}[match.group(1)]
    window = text[match.end() : match.end() + 300]
    version = re.search(r"version (\d)(\.\d)?", window)
    if not version:
        return "agpl-3" if kind == "agpl" else kind
    later = "+" if re.search(r"any later version", window) else ""
    return f"{kind}-{version.group(1)}{version.group(2) or ''}{later}"


def from_free_text(text: str, source: str) -> LicenseEvidence:
    """Keyword search of a free-text license notice, confidence "low".

    Every license named is collected and the most restrictive wins (a GPL notice next to a
    public-domain file still makes the package copyleft). Evidence is the matching line.
    """
    found: list[tuple[int, str]] = [(m.start(), _gnu_name(m, text)) for m in _GNU.finditer(text)]
    found += [(m.start(), name) for pattern, name in _KEYWORDS for m in pattern.finditer(text)]
    judged = [(pos, *classify_name(name)) for pos, name in sorted(found)]
    judged = [j for j in judged if j[2] != "unknown"]
    if not judged:
        return LicenseEvidence(None, "unknown", "no license keyword found", source, "low")
    pos, spdx, status = max(judged, key=lambda j: (_RANK[j[2]], -j[0]))
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    line = text[line_start : line_end if line_end >= 0 else None].strip()
    return LicenseEvidence(spdx, status, line, source, "low")

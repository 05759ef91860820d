"""License evidence: METADATA fields, Debian DEP-5 and free text, expressions, open class."""

import glob
from pathlib import Path

import pytest

from rayworks.pipelines.corpus.licenses import (
    PUBLIC_DOMAIN,
    LicenseEvidence,
    classify_expression,
    from_debian_copyright,
    from_metadata,
    is_open,
    parse_dep5,
)

SITE = Path(__file__).resolve().parents[3] / ".venv/lib/python3.11/site-packages"


def test_license_expression_wins_over_classifiers():
    meta = "Metadata-Version: 2.4\nName: x\nLicense-Expression: MIT\nClassifier: License :: OSI Approved :: BSD License\n\nbody"
    ev = from_metadata(meta, "x")
    assert (ev.spdx, ev.status, ev.evidence) == ("MIT", "permissive", "License-Expression: MIT")


def test_license_free_text_then_classifiers():
    meta = "Name: y\nLicense: GPLv3+\nClassifier: License :: OSI Approved :: MIT License\n"
    assert from_metadata(meta).spdx == "GPL-3.0-or-later"
    meta = (
        "Name: y\nLicense: see LICENSE file\nClassifier: License :: OSI Approved :: BSD License\n"
    )
    ev = from_metadata(meta)
    assert (ev.spdx, ev.status) == (None, "permissive") and "BSD License" in ev.evidence


def test_classifiers_combine_conservatively():
    meta = (
        "Name: z\nClassifier: License :: OSI Approved :: MIT License\n"
        "Classifier: License :: OSI Approved :: GNU General Public License v2 or later (GPLv2+)\n"
    )
    ev = from_metadata(meta)
    assert ev.status == "copyleft" and not is_open(ev)


def test_unknown_text_is_not_guessed():
    ev = from_metadata("Name: w\nLicense: Copyright ACME, all rights reserved-ish\n", "w/METADATA")
    assert (ev.spdx, ev.status) == (None, "unknown")
    assert ev.evidence == "License: Copyright ACME, all rights reserved-ish" and not is_open(ev)
    assert from_metadata("Name: v\nLicense: UNKNOWN\n").evidence.startswith("no License-Expression")


@pytest.mark.parametrize(
    "expr, spdx, status",
    [
        (
            "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0",
            "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0",
            "permissive",
        ),
        ("MIT OR GPL-3.0-only", "MIT OR GPL-3.0-only", "permissive"),
        ("MIT AND GPL-2+", "MIT AND GPL-2.0-or-later", "copyleft"),
        ("GPL-2+ or Artistic", None, "copyleft"),
        ("MIT AND Frobnicate-1.0", None, "unknown"),
        (
            "(MIT OR LGPL-2.1+) and Apache-2.0",
            "(MIT OR LGPL-2.1-or-later) AND Apache-2.0",
            "permissive",
        ),
        (
            "GPL-2.0-or-later WITH Classpath-exception-2.0",
            "GPL-2.0-or-later WITH Classpath-exception-2.0",
            "copyleft",
        ),
        ("CC0-1.0 OR Unlicense", "CC0-1.0 OR Unlicense", "public-domain"),
    ],
)
def test_expressions(expr, spdx, status):
    assert classify_expression(expr) == (spdx, status)


@pytest.mark.parametrize("expr", ["(MIT OR ISC", "MIT AND", "MIT ISC"])
def test_bad_expression_raises(expr):
    with pytest.raises(ValueError, match="license expression"):
        classify_expression(expr)


@pytest.mark.parametrize(
    "package, spdx",
    [
        ("requests", "Apache-2.0"),
        ("numpy", "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0"),
        ("pydantic", "MIT"),
        ("rich", "MIT"),
        ("phonenumbers", "Apache-2.0"),
    ],
)
def test_real_installed_metadata(package, spdx):
    paths = glob.glob(str(SITE / f"{package}-*.dist-info/METADATA"))
    if not paths:
        pytest.skip(f"{package} METADATA not under {SITE}")
    ev = from_metadata(Path(paths[0]).read_text(encoding="utf-8"), paths[0])
    assert ev.spdx == spdx and is_open(ev) and ev.source == paths[0]


DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: demo

Files: debian/*
Copyright: 2020 Someone
License: GPL-2+

Files: *
Copyright: 2019 Upstream
License: Expat or GPL-3+
 Permission is hereby granted ...

License: GPL-2+
 This program is free software ...
"""


def test_dep5_uses_files_star_stanza():
    assert parse_dep5(DEP5)[2]["license"].startswith("Expat or GPL-3+\nPermission")
    ev = from_debian_copyright(DEP5, "demo/copyright")
    assert (ev.spdx, ev.status, ev.confidence) == ("MIT OR GPL-3.0-or-later", "permissive", "high")
    assert ev.evidence == "Files: * / License: Expat or GPL-3+"


def test_free_text_fallback_is_low_confidence():
    text = "This package is in the public domain.\n\nparts: GNU General Public License version 2, or\nany later version."
    ev = from_debian_copyright(text, "pkg/copyright")
    assert (ev.spdx, ev.status, ev.confidence) == ("GPL-2.0-or-later", "copyleft", "low")
    ev = from_debian_copyright("The author places this in the Public Domain.", "pd/copyright")
    assert (ev.spdx, ev.status) == (PUBLIC_DOMAIN, "public-domain") and is_open(ev)
    assert from_debian_copyright("Copyright 2001 Nobody.", "x").status == "unknown"


@pytest.mark.parametrize(
    "package, spdx, status, confidence",
    [
        ("bash", "GPL-3.0-or-later", "copyleft", "high"),
        ("libsqlite3-0", PUBLIC_DOMAIN, "public-domain", "high"),
        ("zlib1g", "Zlib", "permissive", "high"),
        ("base-files", "GPL-2.0-or-later", "copyleft", "low"),
    ],
)
def test_real_debian_copyright(package, spdx, status, confidence):
    path = Path(f"/usr/share/doc/{package}/copyright")
    if not path.is_file():
        pytest.skip(f"{path} absent on this machine")
    ev = from_debian_copyright(path.read_text(encoding="utf-8", errors="replace"), str(path))
    assert (ev.spdx, ev.status, ev.confidence) == (spdx, status, confidence)


def test_is_open_classes():
    make = lambda status: LicenseEvidence(None, status, "e", "s")  # noqa: E731
    assert [
        is_open(make(s))
        for s in ("public-domain", "permissive", "copyleft", "proprietary", "unknown")
    ] == [
        True,
        True,
        False,
        False,
        False,
    ]

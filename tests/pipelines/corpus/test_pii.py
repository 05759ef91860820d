"""PII redaction on hand-made multilingual text: validated spans redacted, look-alikes kept."""

import re

import numpy as np
import pytest

from rayworks.pipelines.corpus.pii import PIIConfig, iban_is_valid, luhn_is_valid, redact

CFG = PIIConfig()


def test_german_contact_block_counts_each_type():
    text = "Kontakt: max.mustermann@beispiel.de, Tel. +49 30 12345678, IBAN DE89 3704 0044 0532 0130 00 (Berlin)."
    out, counts = redact(text, CFG)
    assert out == "Kontakt: <EMAIL>, Tel. <PHONE>, IBAN <IBAN> (Berlin)."
    assert counts == {"email": 1, "iban": 1, "card": 0, "ip": 0, "phone": 1}


def test_iban_with_one_digit_changed_is_kept():
    text = "IBAN DE89 3704 0044 0532 0130 01 bitte prüfen"
    assert not iban_is_valid("DE89 3704 0044 0532 0130 01")
    out, counts = redact(text, CFG)
    assert out == text  # also not re-detected as a card number or phone
    assert sum(counts.values()) == 0


def test_several_countries_ibans_adjacent():
    text = "GB82 WEST 1234 5698 7654 32 FR14 2004 1010 0505 0001 3M02 606 NL91ABNA0417164300"
    out, counts = redact(text, CFG)
    assert out == "<IBAN> <IBAN> <IBAN>"
    assert counts["iban"] == 3


def test_french_cards_luhn_and_phone():
    text = "Carte 4111 1111 1111 1111 ou 4111-1111-1111-1112. Amex 3782 822463 10005. Appelez le 01 23 45 67 89."
    out, counts = redact(text, CFG)
    assert (
        out == "Carte <CARD_NUMBER> ou 4111-1111-1111-1112. Amex <CARD_NUMBER>. Appelez le <PHONE>."
    )
    assert (counts["card"], counts["phone"]) == (2, 1)
    assert luhn_is_valid("4111111111111111") and not luhn_is_valid("4111111111111112")


def test_japanese_phone_and_email():
    text = "お問い合わせ: 03-1234-5678 または info@example.co.jp まで"
    out, counts = redact(text, CFG)
    assert out == "お問い合わせ: <PHONE> または <EMAIL> まで"
    assert counts["phone"] == counts["email"] == 1


def test_public_ips_redacted_private_and_reserved_kept():
    text = "DNS 8.8.8.8 und 2001:4860:4860::8888; LAN 192.168.0.1, 10.0.0.7, lo 127.0.0.1, fe80::1, doc 2001:db8::1, um 10:30:00."
    out, counts = redact(text, CFG)
    assert (
        out
        == "DNS <IP_ADDRESS> und <IP_ADDRESS>; LAN 192.168.0.1, 10.0.0.7, lo 127.0.0.1, fe80::1, doc 2001:db8::1, um 10:30:00."
    )
    assert counts["ip"] == 2


def test_dates_and_ids_are_not_pii():
    text = "Rechnung 2024-01-15, Nr. 12345, Artikel 999.1.1.1"
    out, counts = redact(text, CFG)
    assert out == text and sum(counts.values()) == 0


def test_types_subset_and_custom_placeholder():
    cfg = PIIConfig(types=("email",), placeholders={"email": "[mail]"})
    out, counts = redact("a@b.org +49 30 12345678", cfg)
    assert out == "[mail] +49 30 12345678" and counts == {"email": 1}


def test_region_list_decides_national_numbers():
    text = "ruf 030 12345678 an"
    assert redact(text, PIIConfig(regions=("DE",)))[1]["phone"] == 1
    assert redact(text, PIIConfig(regions=("JP",)))[1]["phone"] == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"types": ("email", "ssn")}, "ssn"),
        ({"regions": ("XX",)}, "XX"),
        ({"placeholders": {}}, "placeholder"),
    ],
)
def test_bad_config_names_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PIIConfig(**kwargs)


def test_phone_regions_follow_the_document_language():
    from rayworks.pipelines.corpus.pii import DEFAULT_REGIONS, regions_for

    assert regions_for("fr", DEFAULT_REGIONS) == ("FR",)
    assert regions_for("en", DEFAULT_REGIONS) == ("US", "GB")
    assert regions_for(None, DEFAULT_REGIONS) == regions_for("xx", DEFAULT_REGIONS)
    assert regions_for("xx", DEFAULT_REGIONS) == DEFAULT_REGIONS
    assert regions_for("en", ("FR",)) == ("FR",)  # nothing of en's configured: all of them
    text = "Appelez le 01 42 68 53 00 demain."  # a Paris number, national format
    assert redact(text, PIIConfig(), "fr")[1]["phone"] == 1
    assert redact(text, PIIConfig(regions=("US", "FR")), "en")[1]["phone"] == 0  # US only


# --- misses closed: no-break spaces, non-ASCII emails -----------------------------------

NBSP, NNBSP = "\u00a0", "\u202f"


@pytest.mark.parametrize("space", [NBSP, NNBSP])
def test_french_typography_phone_and_iban_with_no_break_spaces(space):
    phone = space.join(["01", "23", "45", "67", "89"])
    intl = space.join(["+33", "1", "23", "45", "67", "89"])
    iban = space.join(["FR76", "3000", "6000", "0112", "3456", "7890", "189"])
    text = f"Tél.{NBSP}: {phone} ou {intl}. IBAN{NBSP}: {iban}."
    out, counts = redact(text, CFG, "fr")
    assert out == f"Tél.{NBSP}: <PHONE> ou <PHONE>. IBAN{NBSP}: <IBAN>."
    assert (counts["phone"], counts["iban"]) == (2, 1)
    # one digit changed: the mod-97 check still decides, separators or not
    assert redact(text.replace("189", "188"), CFG, "fr")[1]["iban"] == 0


def test_no_break_space_joins_one_number_but_two_spaces_part_two():
    # a table row: the number between two columns is found, the postcode is not a phone
    row = f"Paris  01{NBSP}23{NBSP}45{NBSP}67{NBSP}89  75001"
    assert redact(row, CFG, "fr")[0] == "Paris  <PHONE>  75001"


@pytest.mark.parametrize(
    "address",
    [
        "élodie.dupont@exemple.fr",
        "user@bücher.de",
        "jürgen.groß@straße.de",
        "иван.петров@пример.рф",
        "δοκιμή@παράδειγμα.ελ",
        "info@xn--bcher-kva.de",
    ],
)
def test_internationalised_emails(address):
    out, counts = redact(f"Écrire à {address}, merci.", CFG)
    assert out == "Écrire à <EMAIL>, merci." and counts["email"] == 1


def test_email_glued_to_cjk_text_stops_at_the_address():
    # CJK is written without spaces: the address is found, the words around it are kept
    assert redact("連絡はinfo@example.co.jpまで", CFG)[0] == "連絡は<EMAIL>まで"


# --- false positives: versions, dates, tables ------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "binutils (2.13.90.0.18-1.7) unstable; urgency=low",  # dotted version + revision
        "gcc-12 (12-20220428-1) unstable; urgency=medium",  # snapshot date + revision
        "libmnl (0.0.0~20101124-1) experimental",
        "Build-Depends: debhelper >= 9.20151219",
        "Reinhold, 1993, ISBN 0-442-01272-1.",
        "Date:   Thu Jun 14 11:38:32 2018 -0700",  # a git date: seconds, year, offset
        "ruby 1.9.0 (2004-12-16) [i686-linux]",
        "Recommendation ITU-T T.871 (05/2011): JPEG File Interchange Format",
        "Fixing bug #1688954 in window.c",
        "https://curl.se/mail/lib-2023-01/0070.html",
        "Clause 252.227-7013 (c) (1) of the Rights in Technical Data",
        "commit b3807dccab5aee5455137654647c9c083addb",  # a hash with a Luhn-valid run
    ],
)
@pytest.mark.parametrize("lang", [None, "en"])
def test_version_strings_dates_and_ids_are_not_phones(text, lang):
    assert redact(text, CFG, lang) == (text, dict.fromkeys(CFG.types, 0))


def _random_table(sep: str, seed: int = 0, rows: int = 300) -> str:
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        widths = [rng.choice([4, 5, 6]) for _ in range(8)]
        lines.append(sep.join(str(rng.randrange(10 ** (w - 1), 10**w)) for w in widths))
    return "\n".join(lines)


def _luhn_runs(text: str) -> int:
    """What Luhn alone finds: digit runs of 13-19 digits with single spaces or hyphens
    between digits, first digit 2-6 (the rule before commit c69a4a6)."""
    import re

    runs = re.finditer(r"(?<![\d-])[2-6](?:[ -]?\d){12,18}(?!\d)", text)
    return sum(luhn_is_valid(re.sub(r"[ -]", "", m.group())) for m in runs)


@pytest.mark.parametrize("sep", [" ", "\t", "  "])
def test_random_numeric_table_gives_no_card_or_phone_hits(sep):
    table = _random_table(sep)
    if sep == " ":
        assert _luhn_runs(table) >= 10  # the table does fool a Luhn-only rule
    out, counts = redact(table, CFG)
    assert out == table and sum(counts.values()) == 0


# --- true positives still found ----------------------------------------------------------


@pytest.mark.parametrize(
    "lang, phone",
    [
        ("fr", "01 23 45 67 89"),
        ("fr", "01.23.45.67.89"),
        ("fr", "+33 1 23 45 67 89"),
        ("fr", "06 12 34 56 78"),
        ("de", "030 12345678"),
        ("de", "(030) 1234567"),
        ("de", "+49 (0)30 1234567"),
        ("de", "089/12345678"),
        ("en", "(650) 253-0000"),
        ("en", "650-253-0000"),
        ("en", "650.253.0000"),
        ("en", "+1 650-253-0000"),
        ("en", "020 7946 0958"),
        ("en", "+44 20 7946 0958"),
    ],
)
def test_real_looking_phones_in_their_formats(lang, phone):
    assert redact(f"Tel: {phone}.", CFG, lang)[0] == "Tel: <PHONE>."


def test_phone_extension_is_part_of_the_span():
    assert redact("call +1 650-253-0000 x123 today", CFG, "en")[0] == "call <PHONE> today"


def test_two_numbers_split_by_a_slash():
    out, counts = redact("06 12 34 56 78 / 01 98 76 54 32", CFG, "fr")
    assert out == "<PHONE> / <PHONE>" and counts["phone"] == 2


@pytest.mark.parametrize(
    "card",
    [
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "4012888888881881",  # Visa
        "5555 5555 5555 4444",
        "2223 0031 2200 3222",  # Mastercard (51-55, 2221-2720)
        "3782 822463 10005",  # Amex 4-6-5
        "6011 1111 1111 1117",
        "3530 1113 3330 0000",  # Discover, JCB
        f"4111{NBSP}1111{NBSP}1111{NBSP}1111",
    ],
)
def test_luhn_valid_cards_with_known_prefixes(card):
    out, counts = redact(f"Carte {card}, exp. 12/29", CFG)
    assert out == "Carte <CARD_NUMBER>, exp. 12/29" and counts["card"] == 1


@pytest.mark.parametrize(
    "text",
    [
        "7111 1111 1111 1114",  # Luhn-valid, no card network starts with 7
        "4111 1111 1111 1111 1111 2222",  # part of a longer run of groups
        "2222 4111 1111 1111 1111",
        "4111 1111-1111 1111",  # mixed separators
        "41 1111 1111 1111 11",  # not a card layout
        "ratio 0.4111111111111111",  # a decimal's digits
        "3782 822463 10005 9",  # Amex followed by more digits
    ],
)
def test_luhn_valid_digit_runs_that_are_not_cards(text):
    assert redact(text, PIIConfig(types=("card",)))[1]["card"] == 0


def test_overlap_resolution_equals_the_pairwise_rule():
    """Longest, then `PII_TYPES` order, then leftmost, each kept span overlapping none kept
    before: the neighbour check gives what the check against every kept span gives."""
    import random

    from rayworks.pipelines.corpus.pii import PII_TYPES, _non_overlapping

    rng = random.Random(3)
    for _ in range(300):
        spans = set()
        for _ in range(rng.randrange(0, 40)):
            start = rng.randrange(0, 200)
            spans.add((start, start + rng.randrange(1, 25), rng.choice(PII_TYPES)))
        ordered = sorted(spans, key=lambda s: (s[0] - s[1], PII_TYPES.index(s[2]), s[0]))
        chosen: list = []
        for s, e, kind in ordered:
            if all(e <= cs or s >= ce for cs, ce, _ in chosen):
                chosen.append((s, e, kind))
        assert _non_overlapping(list(spans)) == sorted(chosen)


# --- speed paths (`pii.py` "Speed") equal the plain scans ---------------------------------

_PIECES = [
    "max.mustermann@beispiel.de",
    "a@b",
    "@",
    "x@y.z",
    "élodie@exemple.fr",
    "..@..",
    "+",
    "DE89 3704 0044 0532 0130 00",
    "GB82WEST12345698765432",
    "AB12",
    "AB12 3456 7890 1234 5",
    "4111 1111 1111 1111",
    "4111-1111-1111-1111",
    "3782 822463 10005",
    "4012888888881881",
    "8.8.8.8",
    "192.168.0.1",
    "1.2.3.4.5",
    "999.1.1.1",
    "2001:4860:4860::8888",
    "fe80::1",
    "cafe::beef",
    "10:30:00",
    "a::b:",
    "::",
    "std::vector",
    "+49 30 12345678",
    "(030) 1234567",
    "01 23 45 67 89",
    "01\u00a023\u00a045\u00a067\u00a089",
    "650-253-0000 x123",
    "2024-01-15",
    "(2.13.90.0.18-1.7)",
    "12-20220428-1",
    "06 12 34 56 78 / 01 98 76 54 32",
    "#1688954",
    "\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668",
    "\uff10\uff13-1234-5678",
    "0.001462,",
]
_GLUE = [
    " ",
    "  ",
    "\n",
    "\t",
    "",
    ".",
    ",",
    "-",
    "/",
    "(",
    ")",
    ":",
    "x",
    "é",
    "_",
    "\u00a0",
    "\u3000",
    "7",
    "12",
    "A",
    "Tel. ",
    " ext. 12 ",
    "\u20ac",
    "%",
]


def _pii_soup(seed: int, parts: int = 600) -> str:
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(parts):
        out.append(rng.choice(_GLUE))
        piece = rng.choice(_PIECES)
        if rng.random() < 0.3:  # damage it: a digit changed, a character dropped
            i = rng.randrange(len(piece))
            piece = piece[:i] + rng.choice("0123456789 .-:@") + piece[i + 1 :]
        out.append(piece)
    return "".join(out)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("lang", [None, "fr", "en"])
def test_long_text_windows_find_what_the_whole_text_scan_finds(monkeypatch, seed, lang):
    from rayworks.pipelines.corpus import pii

    text = _pii_soup(seed)
    win, regions = pii._Windows(text), pii.regions_for(lang, CFG.regions)
    ibans = pii._iban_candidates(text)
    assert pii._iban_candidates(text, win) == ibans
    assert pii._find_cards(text, ibans, win) == pii._find_cards(text, ibans)
    assert pii._find_ips(text, win) == pii._find_ips(text)
    assert pii._find_phones(text, regions, win) == pii._find_phones(text, regions)
    monkeypatch.setattr(pii, "_FAST_MIN_CHARS", 10**12)  # every finder on the whole text
    whole = pii.find_pii(text, CFG, lang)
    monkeypatch.setattr(pii, "_FAST_MIN_CHARS", 0)  # every text through `_Windows`
    assert pii.find_pii(text, CFG, lang) == whole
    assert {kind for _, _, kind in whole} == set(CFG.types)  # the soup holds every kind


def test_emails_from_each_at_equal_the_pattern_scan():
    from rayworks.pipelines.corpus.pii import _EMAIL, _find_emails

    for seed in range(20):
        text = _pii_soup(seed, parts=200).replace(" ", "").replace("\n", "@")
        assert _find_emails(text) == [(m.start(), m.end(), "email") for m in _EMAIL.finditer(text)]


def test_class_table_holds_every_digit():
    from rayworks.pipelines.corpus.pii import _CODE_POINTS

    above = np.arange(_CODE_POINTS, 0x110000, dtype=np.uint32).tobytes()
    assert not re.search(r"\d", above.decode("utf-32-le", "surrogatepass"))


@pytest.mark.parametrize(
    "region",
    [
        "US",
        "GB",
        "DE",
        "FR",
        "ES",
        "IT",
        "NL",
        "JP",
        "AR",
        "MX",
        "BR",
        "IN",
        "AU",
        "GG",
        "CA",
        "RU",
        "CN",
        "CH",
    ],
)
def test_phone_precheck_never_refuses_a_valid_number(region):
    """`_RegionRules.may_be_valid` is a necessary condition of libphonenumber's answer: on
    every example number of the region's country code, written as digits in national and
    international shapes, and on random digit strings, it refuses none it accepts."""
    import random

    import phonenumbers

    from rayworks.pipelines.corpus.pii import _libphonenumber_valid, _region_rules

    rules = _region_rules(region)
    meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
    code = str(meta.country_code)
    idd = re.sub(r"\D", "", meta.preferred_international_prefix or "00")  # RU: "8~10"
    numbers = set()
    for other in phonenumbers.COUNTRY_CODE_TO_REGION_CODE[meta.country_code]:
        for kind in phonenumbers.PhoneNumberType.values():
            example = phonenumbers.example_number_for_type(other, kind)
            if example is None:
                continue
            nsn = phonenumbers.national_significant_number(example)
            national = phonenumbers.format_number(example, phonenumbers.PhoneNumberFormat.NATIONAL)
            numbers |= {
                nsn,
                code + nsn,
                idd + code + nsn,
                re.sub(r"\D", "", national),
                "0" + nsn,
                "1" + nsn,
                code + "0" + nsn,
            }
    rng = random.Random(region)
    for _ in range(1500):
        head = rng.choice(["", "0", "1", "00", code, "0" + code[:1], idd])
        numbers.add(head + "".join(rng.choice("0123456789") for _ in range(rng.randint(5, 14))))
    numbers = {n for n in numbers if 7 <= len(n) <= 17}
    valid = {n for n in numbers if _libphonenumber_valid(n, region)}
    assert len(valid) >= 5
    assert [n for n in sorted(valid) if not rules.may_be_valid(n)] == []
    if region in ("GG", "CA"):  # not their country code's main region: never refused
        assert all(rules.may_be_valid(n) for n in numbers)
    else:  # and it does refuse many of the others
        assert sum(not rules.may_be_valid(n) for n in numbers - valid) > len(numbers - valid) / 3

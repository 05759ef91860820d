"""PII redaction for the corpus pipeline: emails, public IPs, phones, IBANs, card numbers.

Common Corpus says only that PII was removed with "custom procedures for multilingual
data" (the tooling is not public), so we follow the
datatrove practice (`PIIFormatter`): find spans with cheap patterns, replace each span by a
typed placeholder such as `<EMAIL>`, and count the redactions per type so the datasheet can
report them. Unlike plain regexes, every candidate except emails is *validated* before it is
redacted, so numbers that only look like PII (dates, invoice ids, version strings) survive:

- emails: an address pattern (no validation possible offline) whose local part and domain
  may hold Latin, Greek and Cyrillic letters (`élodie@exemple.fr`, `user@bücher.de`);
  scripts written without spaces (CJK, Thai) are left out on purpose, because there a
  letter class would swallow the words glued to the address (a simplification);
- IP addresses: IPv4 and IPv6 candidates parsed by `ipaddress`; only *public* (globally
  routable) addresses are redacted. Private (10/8, 192.168/16, fc00::/7), loopback,
  link-local, documentation (192.0.2.0/24, 2001:db8::/32) and other reserved ranges are
  kept: they identify nobody, and code/docs are full of them. A four-part version string
  such as 1.2.3.4 is also a public address and is redacted (accepted false positive);
- phone numbers: runs of digits and phone separators (including the no-break spaces of
  French typography) cut into candidates the way `phonenumbers.PhoneNumberMatcher` cuts
  them, then `phonenumbers.parse` and libphonenumber's `Leniency.VALID` rule (a valid
  number, national prefix present where its region writes one), cached per number and
  region, for each region in `PIIConfig.regions`; numbers written with `+` and a country
  code match in any region. Version strings and dates are refused before parsing
  (`_not_a_phone`);
- IBANs: the ISO 13616 country length table plus the mod-97 checksum (remainder 1);
  groups may be separated by spaces or no-break spaces;
- payment cards: a card network's IIN prefix and one of its lengths (`CARD_RANGES`), the
  Luhn checksum, and a card's layout: one digit block, or groups 4-4-4-4(-3) / 4-6-5 /
  4-6-4 with one separator, not continued by more digits. Luhn alone passes one random
  digit string in ten, so a table of numbers gave card hits before these rules.

Overlapping matches (an IBAN's digits also look like a phone number) are resolved
deterministically: the longest span wins, then the type order of `PII_TYPES`, then the
leftmost start. `redact` is pure Python (no Ray) so a scoring step can call
it per row (`pii_step.py` applies it to the text, the metadata fields and the rejects).

Speed (the same spans as the plain scans, checked by `test_pii.py`): a scan that starts at
every digit or letter costs ~10-25 ns per character in `re`, about a second per type on
60 MB of text. In a text of `_FAST_MIN_CHARS` or more, one numpy pass over its code points
(`_Windows`) finds the only places a match can start or lie (the digit runs with enough
digits, the `AA00` starts of IBANs, the runs of IPv6 characters) and the same patterns run
there only; emails are matched from each `@`. Before `phonenumbers.parse`, a number written
without `+` must pass `_RegionRules.may_be_valid`, a necessary condition read from
libphonenumber's metadata that refuses ~95% of the digit runs of code and tables at a
tenth of the cost of parsing them.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import phonenumbers
from phonenumbers import COUNTRY_CODE_TO_REGION_CODE, NumberFormat, PhoneMetadata
from phonenumbers.phonenumbermatcher import (  # the matcher's own rules, reused as is
    _MATCHING_BRACKETS,
    _is_national_prefix_present_if_required,
)
from phonenumbers.phonenumberutil import (  # the same, for `_RegionRules`
    _formatting_rule_has_first_group_only,
    region_code_for_country_code,
)

PII_TYPES = ("email", "iban", "card", "ip", "phone")
"""Every PII type; the order is also the tie-break between equally long overlapping spans."""

DEFAULT_PLACEHOLDERS = {
    "email": "<EMAIL>",
    "ip": "<IP_ADDRESS>",
    "phone": "<PHONE>",
    "iban": "<IBAN>",
    "card": "<CARD_NUMBER>",
}

DEFAULT_REGIONS = ("US", "GB", "DE", "FR", "ES", "IT", "NL", "JP")
"""Regions tried for phone numbers without a `+` country code (Common Corpus is mostly
English, French, German, Spanish, Italian and Dutch)."""

LANGUAGE_REGIONS = {
    "en": ("US", "GB"),
    "fr": ("FR",),
    "de": ("DE",),
    "es": ("ES",),
    "it": ("IT",),
    "nl": ("NL",),
    "ja": ("JP",),
}
"""Regions tried for a document of a known language (ours, not from a paper): a French
document's national numbers are French ones; `+`-prefixed numbers are found in any region.
Trying all eight regions on every digit run made phone matching most of the pipeline's
time on tables and manuals."""


def regions_for(lang: str | None, regions: tuple[str, ...]) -> tuple[str, ...]:
    """The phone regions for a document in `lang` (all `regions` when unknown)."""
    mine = tuple(r for r in LANGUAGE_REGIONS.get(lang or "", ()) if r in regions)
    return mine or regions


# ISO 13616 IBAN lengths per country (SWIFT IBAN registry).
IBAN_LENGTHS = {
    "AD": 24,
    "AE": 23,
    "AL": 28,
    "AT": 20,
    "AZ": 28,
    "BA": 20,
    "BE": 16,
    "BG": 22,
    "BH": 22,
    "BR": 29,
    "BY": 28,
    "CH": 21,
    "CR": 22,
    "CY": 28,
    "CZ": 24,
    "DE": 22,
    "DK": 18,
    "DO": 28,
    "EE": 20,
    "EG": 29,
    "ES": 24,
    "FI": 18,
    "FO": 18,
    "FR": 27,
    "GB": 22,
    "GE": 22,
    "GI": 23,
    "GL": 18,
    "GR": 27,
    "GT": 28,
    "HR": 21,
    "HU": 28,
    "IE": 22,
    "IL": 23,
    "IQ": 23,
    "IS": 26,
    "IT": 27,
    "JO": 30,
    "KW": 30,
    "KZ": 20,
    "LB": 28,
    "LC": 32,
    "LI": 21,
    "LT": 20,
    "LU": 20,
    "LV": 21,
    "MC": 27,
    "MD": 24,
    "ME": 22,
    "MK": 19,
    "MR": 27,
    "MT": 31,
    "MU": 30,
    "NL": 18,
    "NO": 15,
    "PK": 24,
    "PL": 28,
    "PS": 29,
    "PT": 25,
    "QA": 29,
    "RO": 24,
    "RS": 22,
    "SA": 24,
    "SC": 31,
    "SE": 24,
    "SI": 19,
    "SK": 24,
    "SM": 27,
    "ST": 25,
    "SV": 28,
    "TL": 23,
    "TN": 24,
    "TR": 26,
    "UA": 29,
    "VA": 22,
    "VG": 24,
    "XK": 20,
}

CARD_RANGES = (
    ("4", "4", (13, 16, 19)),  # Visa
    ("51", "55", (16,)),
    ("2221", "2720", (16,)),  # Mastercard
    ("34", "34", (15,)),
    ("37", "37", (15,)),  # American Express
    ("6011", "6011", (16, 17, 18, 19)),
    ("644", "649", (16, 17, 18, 19)),  # Discover
    ("65", "65", (16, 17, 18, 19)),
    ("62", "62", (16, 17, 18, 19)),  # Discover, UnionPay
    ("3528", "3589", (16, 17, 18, 19)),  # JCB
    ("36", "36", (14, 15, 16, 17, 18, 19)),
    ("300", "305", (14, 15, 16, 17, 18, 19)),
    ("38", "39", (14, 15, 16, 17, 18, 19)),  # Diners Club
    ("2131", "2131", (15,)),
    ("1800", "1800", (15,)),  # JCB, 15-digit legacy ranges
    ("5018", "5018", tuple(range(12, 20))),
    ("5020", "5020", tuple(range(12, 20))),
    ("5038", "5038", tuple(range(12, 20))),
    ("5893", "5893", tuple(range(12, 20))),
    ("6304", "6304", tuple(range(12, 20))),
    ("6759", "6759", tuple(range(12, 20))),
    ("6761", "6763", tuple(range(12, 20))),  # Maestro
    ("2200", "2204", (16, 17, 18, 19)),  # Mir
)
"""(first, last prefix of the same length, card lengths) per card network's issuer
identification (IIN) range, as the networks publish them (a snapshot of the list on
Wikipedia's "Payment card number" page; ranges are added over the years). A Luhn-valid run
outside every range is not redacted."""

_NBSP = "\u00a0\u202f"  # no-break space, narrow no-break space (French typography)

# Letters an email address may hold besides ASCII: Latin-1 letters (not U+00D7, U+00F7), Latin
# Extended A/B and Additional, combining accents, Greek, Cyrillic.
_MAIL_LETTERS = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff\u0300-\u036f\u0370-\u03ff\u0400-\u04ff"
_MAIL = _MAIL_LETTERS + "0-9"
_EMAIL = re.compile(
    rf"(?<![{_MAIL}._%+-])[{_MAIL}][{_MAIL}._%+-]*@[{_MAIL}-]+(?:\.[{_MAIL}-]+)*"
    rf"\.(?:xn--[A-Za-z0-9-]+|[{_MAIL_LETTERS}]{{2,}})(?![{_MAIL}])"
)
# Each pattern starts with a character class and checks what precedes its first character
# by a lookbehind placed after it ("\d(?<![\w.]\d)" is "(?<![\w.])\d"): a pattern that
# starts with a lookbehind is tried at every position of the text, one that starts with a
# class is only tried where that class occurs (the `re` engine's prefix scan).
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?!\w|\.\d)")
_IPV6 = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?(?![\w:])"
)
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{0,4}:")
"""Two colons at most four hex digits apart: in every IPv6 candidate, rare in prose, and
found by a fast literal scan; `_IPV6` (hex letters are everywhere) runs only if it is."""
# Country code, check digits, then 11-30 alphanumerics optionally separated by one space or
# no-break space; the country's length decides where the IBAN really ends.
_IBAN = re.compile(rf"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{{2}}(?:[ {_NBSP}]?[A-Z0-9]){{11,30}}")
_IBAN_SEPARATORS = re.compile(rf"[ {_NBSP}]")
_CARD_SEP = rf"[ \-{_NBSP}]"
_CARD = re.compile(
    rf"[0-9](?<![\w.,/-][0-9])(?<![0-9]{_CARD_SEP}[0-9])"  # not the tail of a word, decimal
    rf"(?:[0-9]{{11,18}}"  # or digit run; then one block of 12-19 digits,
    rf"|[0-9]{{3}}(?P<a>{_CARD_SEP})[0-9]{{6}}(?P=a)[0-9]{{4,5}}"  # Amex 4-6-5, Diners 4-6-4
    rf"|[0-9]{{3}}(?P<b>{_CARD_SEP})[0-9]{{4}}(?P=b)[0-9]{{4}}(?:(?P=b)[0-9]{{4}})?"
    rf"(?:(?P=b)[0-9]{{1,3}})?)"  # or 4-4-4[-4][-1..3]
    rf"(?!\w|[.,/][0-9]|{_CARD_SEP}[0-9])"  # not followed by more digits
)
_NON_CARD_DIGIT = re.compile(r"[^0-9]")


@dataclass(frozen=True)
class PIIConfig:
    """Which PII to redact and how.

    types: PII types to redact, a subset of `PII_TYPES`.
    placeholders: replacement text per type (defaults `DEFAULT_PLACEHOLDERS`).
    regions: ISO 3166 region codes for phone numbers without a `+` country code.
    """

    types: tuple[str, ...] = PII_TYPES
    placeholders: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PLACEHOLDERS))
    regions: tuple[str, ...] = DEFAULT_REGIONS

    def __post_init__(self) -> None:
        unknown = [t for t in self.types if t not in PII_TYPES]
        if unknown:
            raise ValueError(f"PIIConfig.types: unknown {unknown}; choose from {PII_TYPES}")
        missing = [t for t in self.types if t not in self.placeholders]
        if missing:
            raise ValueError(f"PIIConfig.placeholders: no placeholder for {missing}")
        supported = phonenumbers.SUPPORTED_REGIONS
        bad = [r for r in self.regions if r not in supported]
        if bad:
            raise ValueError(f"PIIConfig.regions: {bad} are not phonenumbers region codes")
        if "phone" in self.types and not self.regions:
            raise ValueError("PIIConfig.regions: empty, but 'phone' is in types")


Span = tuple[int, int, str]  # (start, end, type)


def iban_is_valid(iban: str) -> bool:
    """ISO 13616: known country, that country's length, and mod-97 of the rearranged
    number (first four characters moved to the end, letters as 10..35) equal to 1."""
    compact = _IBAN_SEPARATORS.sub("", iban).upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact.isalnum():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def luhn_is_valid(digits: str) -> bool:
    """Luhn checksum over a digit string: double every second digit from the right."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_network_fits(digits: str) -> bool:
    """Whether `digits` starts with a card network's IIN range and has one of its lengths."""
    return any(
        lo <= digits[: len(lo)] <= hi and len(digits) in lengths for lo, hi, lengths in CARD_RANGES
    )


_MAIL_RUN = re.compile(rf"[{_MAIL}._%+-]*")
"""The characters of an address's local part (also those `_EMAIL` refuses before it)."""


def _local_start(text: str, at: int) -> int:
    """Where the run of `_MAIL_RUN` characters that ends before `text[at]` starts (read
    backwards, 64 characters at a time)."""
    end = at
    while True:
        lo = max(0, end - 64)
        run = _MAIL_RUN.match(text[lo:end][::-1]).end()
        if run < end - lo or lo == 0:
            return end - run
        end = lo


def _find_emails(text: str) -> list[Span]:
    """`_EMAIL.finditer`, tried only where a match can start. An address holds one `@`
    and starts where the run of local-part characters before that `@` starts (a start
    inside the run fails the lookbehind), so each `@` is one place to try, in order."""
    spans, pos = [], 0
    at = text.find("@")
    while at >= 0:
        start = _local_start(text, at)
        if pos <= start < at and (m := _EMAIL.match(text, start)):
            spans.append((start, m.end(), "email"))
            pos = m.end()
        at = text.find("@", max(at + 1, pos))
    return spans


def _find_ips(text: str, win: _Windows | None = None) -> list[Span]:
    """Public IPv4 and IPv6 addresses; in a long text only where `win` says one can be."""
    whole = [(0, len(text))]
    matches = [m for lo, hi in (win.ipv4() if win else whole) for m in _IPV4.finditer(text, lo, hi)]
    if _IPV6_HINT.search(text):
        if win is None:
            matches += _IPV6.finditer(text)
        else:
            matches += filter(None, (_IPV6.match(text, s) for s in win.ipv6_starts(text)))
    return [(m.start(), m.end(), "ip") for m in matches if _is_public_ip(m.group())]


@functools.lru_cache(maxsize=1 << 12)
def _is_public_ip(candidate: str) -> bool:
    """Whether `candidate` parses as an IP address that is globally routable (private,
    loopback and reserved ones are kept on purpose); cached: code repeats its `::`s."""
    try:
        return ipaddress.ip_address(candidate).is_global
    except ValueError:
        return False  # 999.1.1.1, a clock time 10:30:00, ...


# --- phones ----------------------------------------------------------------------------

_PHONE_SEPARATORS = rf" {_NBSP}\u3000\-\u2010-\u2015\u2212\u30fc\uff0d./()"
_PHONE_RUN = re.compile(rf"\d(?:[{_PHONE_SEPARATORS}]{{0,3}}\d)*")
"""A run of digits joined by at most three phone separators (libphonenumber allows four
punctuation characters; three covers ") - " and " / "). A `+`, `(` or `(+` just before it
is added by `_find_phones` (a pattern starting with a digit is scanned much faster)."""
_PHONE_BREAKS = tuple(
    re.compile(p)
    for p in (
        r"/+",
        r"(?=\()",
        r"\s-|-\s",
        r"[\u2012-\u2015\uff0d]",
        r"\.+",
        r"(?: |\u3000){2,}",
        r"(?: |\u3000)+",
    )
)
"""Where a run that is not one number is cut, tried in this order (first cut that yields a
valid number wins), as `PhoneNumberMatcher`'s inner matches: slash, opening bracket, spaced
hyphen, long dashes, full stop, then spaces; two or more spaces first (table columns), and
never at a no-break space, which joins the groups of one number."""
_BREAK_CHARS = tuple(
    map(frozenset, ("/", "(", "-", "\u2012\u2013\u2014\u2015\uff0d", ".", " \u3000", " \u3000"))
)
"""Characters each of `_PHONE_BREAKS` needs (a run without any has no such cut)."""
_PHONE_MIN_DIGITS = 7
"""Fewer digits are never redacted as a phone: the shortest numbers `phonenumbers` calls
valid in `DEFAULT_REGIONS` are local numbers without an area code, which identify no one
and which source code and tables are full of (a simplification; name it in results)."""
_PHONE_MAX_DIGITS = 17
"""E.164 allows 15 digits; an international prefix such as 00 adds two."""
_EXTENSION = re.compile(r" ?(?:[xX#]|[eE]xt[.n]?|extension|;ext=) ?\d{1,7}(?!\w)")
"""An extension after a number ("x957", "ext. 12"): part of the redacted span, as in
libphonenumber, whose matches include it."""
_DIGIT_GROUP = re.compile(r"\d+")
_NON_DIGIT = re.compile(r"\D")
# libphonenumber's own refusals (phonenumbermatcher.py): publication pages, slash dates,
# time stamps; ours: ISO dates, YYYYMMDD groups, dotted quads.
_PUB_PAGES = re.compile(r"\d{1,5}-+\d{1,5}\s{0,4}\(\d{1,4}")
_SLASH_DATE = re.compile(r"(?:(?:[0-3]?\d/[01]?\d)|(?:[01]?\d/[0-3]?\d))/(?:[12]\d)?\d{2}")
_TIME_STAMP = re.compile(r"[12]\d{3}[-/]?[01]\d[-/]?[0-3]\d +[0-2]\d$")
_TIME_SUFFIX = re.compile(r":[0-5]\d")
_DATE = re.compile(
    r"(?<!\d)(?:(?:19|20)\d\d([-./])(?:0?[1-9]|1[0-2])\1(?:0?[1-9]|[12]\d|3[01])"
    r"|(?:0?[1-9]|[12]\d|3[01])([-./])(?:0?[1-9]|1[0-2])\2(?:19|20)\d\d)(?!\d)"
)
_YYYYMMDD = re.compile(r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])")
_DOTTED_QUAD = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


def _glued(char: str) -> bool:
    """A Latin letter (or accent), `%` or a currency sign: a number touching one is part of
    a word, a code or an amount (libphonenumber's rule for `Leniency.VALID`)."""
    if char == "%":
        return True
    category = unicodedata.category(char)
    latin = char <= "\u036f" or "\u1e00" <= char <= "\u1eff"
    return category == "Sc" or (latin and (category[0] == "L" or category == "Mn"))


def _touches_word(text: str, start: int, stop: int) -> bool:
    """Whether `text[start:stop]` is glued to what surrounds it: a Latin letter, `%` or
    currency sign on either side (`_glued`), or before it `#` (an issue number), a colon
    after a digit (the seconds of "11:38:32 2018 -0700") or `-`, `/`, `_` after a letter or
    digit (an identifier or path: "lib-2023-01/0070"). A number opened by `+` or a bracket
    is only checked after its end."""
    if stop < len(text) and _glued(text[stop]):
        return True
    if start == 0 or text[start] in "+(":
        return False
    before, before2 = text[start - 1], text[start - 2] if start > 1 else " "
    return (
        _glued(before)
        or before == "#"
        or (before == ":" and before2.isdigit())
        or (before in "-/_" and before2.isalnum())
    )


def _not_a_phone(text: str, start: int, end: int) -> bool:
    """Shapes that parse as valid numbers somewhere but are dates, times, page ranges,
    dotted quads or version strings (`binutils (2.13.90.0.18-1.7)`, `gcc (12-20220428-1)`):
    dots mixed with hyphens, a one-digit group after the first in a dotted number, a
    one-digit last group (a Debian revision), a YYYYMMDD group."""
    piece = text[start:end]
    if piece.isdecimal():  # one group of digits: no rule below applies
        return False
    if ("(" in piece or ")" in piece) and not _MATCHING_BRACKETS.fullmatch(piece):
        return True  # "T.871 (05/2011": a bracket opened inside and never closed
    if _SLASH_DATE.search(piece) or _PUB_PAGES.search(piece) or _DATE.search(piece):
        return True
    if _TIME_STAMP.search(piece) and _TIME_SUFFIX.match(text, end):
        return True
    if _DOTTED_QUAD.fullmatch(piece):
        return True
    groups = _DIGIT_GROUP.findall(piece)
    if len(groups) > 1 and len(groups[-1]) == 1:
        return True
    dotted_version = "+" not in piece and any(len(g) == 1 for g in groups[1:])
    if "." in piece and ("-" in piece or dotted_version):
        return True
    return len(groups) > 1 and any(len(g) == 8 and _YYYYMMDD.fullmatch(g) for g in groups)


@functools.lru_cache(maxsize=1 << 16)
def _valid_number(number: str, region: str | None) -> bool:
    """libphonenumber's `Leniency.VALID`: a valid number whose national prefix is written
    when its region writes one (so a French "1 23 45 67 89" is not a number, "01 ..." is).
    `number` is digits, with a leading `+` if it was written; cached per (number, region),
    which is what makes repeated numbers (tables, footers) cheap. `is_valid_number`, not
    `is_valid_number_for_region`: a Canadian number in a US document is valid in +1.
    Numbers without `+` that `_RegionRules.may_be_valid` refuses are not parsed."""
    if region is not None and not _region_rules(region).may_be_valid(number):
        return False
    return _libphonenumber_valid(number, region)


def _libphonenumber_valid(number: str, region: str | None) -> bool:
    """`_valid_number` without the pre-check."""
    try:
        parsed = phonenumbers.parse(number, region, keep_raw_input=True)
    except phonenumbers.NumberParseException:
        return False
    return phonenumbers.is_valid_number(parsed) and _is_national_prefix_present_if_required(parsed)


_NUMBER_TYPES = (
    "premium_rate",
    "toll_free",
    "shared_cost",
    "voip",
    "personal_number",
    "pager",
    "uan",
    "voicemail",
    "fixed_line",
    "mobile",
)
"""The number types `is_valid_number` tries (`phonenumberutil._number_type_helper`)."""


class _RegionRules:
    """A necessary condition for `_libphonenumber_valid(digits, region)` on digits written
    without `+`, read from libphonenumber's metadata and the code of phonenumbers 9
    (`parse`, `is_valid_number`, `_is_national_prefix_present_if_required`):

    1. digits that start with the region's international (IDD) prefix take their country
       code from the number: not checked here, libphonenumber decides;
    2. otherwise the country code is the region's, and the national significant number
       (NSN) is the digits or the digits after a national prefix (or as the region's
       transform rule rewrites them), or, when the digits start with the country code,
       what follows it, stripped that way once or twice;
    3. a valid NSN matches a number type (fixed line, mobile, toll free, ...) of a region
       of that country code, with one of that type's lengths;
    4. digits read as a national number without a national prefix are the NSN themselves,
       and their format must not need the prefix (`Leniency.VALID`).

    `may_be_valid` is False only when no NSN of 2. can pass 3. and 4.; what it does not
    reason about (digits other than ASCII, a region that is not its country code's main
    region, patterns it cannot combine) is left to libphonenumber. Codes, tables and
    numeric data are full of 7-17 digit runs: it refuses ~95% of them at ~2 µs each, where
    parsing costs ~30 µs. `test_pii.py` checks that it never refuses a valid number.
    """

    def __init__(self, region: str) -> None:
        meta = PhoneMetadata.metadata_for_region(region)
        code = meta.country_code
        self.code = str(code)
        self.idd = re.compile(meta.international_prefix) if meta.international_prefix else None
        prefix = meta.national_prefix_for_parsing
        self.prefix = re.compile(prefix) if prefix else None
        self.rule = meta.national_prefix_transform_rule or None
        # `_choose_formatting_pattern_for_number`'s look-ups, compiled once: (its last
        # leading-digits pattern or None, its pattern, whether it needs the national prefix)
        self.formats = [
            (
                re.compile(f.leading_digits_pattern[-1]) if f.leading_digits_pattern else None,
                re.compile(f.pattern),
                _needs_national_prefix(f),
            )
            for f in meta.number_format
        ]
        by_length: dict[int, set[str]] = {}  # length (0: any) -> patterns of that length
        for other in COUNTRY_CODE_TO_REGION_CODE[code]:
            other_meta = PhoneMetadata.metadata_for_region(other, None)
            for kind in _NUMBER_TYPES if other_meta else ():
                desc = getattr(other_meta, kind)
                if desc is not None and desc.national_number_pattern:
                    for length in desc.possible_length or (0,):
                        by_length.setdefault(length, set()).add(desc.national_number_pattern)
        patterns = [p for group in by_length.values() for p in group]
        self.exact = (
            region_code_for_country_code(code) == region
            and not any(re.search(r"\\[1-9]|\(\?P[<=]", p) for p in patterns)
            and (not self.rule or (self.prefix is not None and self.prefix.groups > 0))
        )
        self.types = {
            n: re.compile("|".join(f"(?:{p})" for p in sorted(group)))
            for n, group in by_length.items()
        }
        self.any_length = self.types.pop(0, None)

    def may_be_valid(self, digits: str) -> bool:
        """False only if `_libphonenumber_valid(digits, region)` is surely False."""
        if not self.exact or not digits.isascii() or (self.idd and self.idd.match(digits)):
            return True
        head = self.prefix.match(digits) if self.prefix else None
        nsns = self._stripped(digits, head) if head else []
        if head is None and self._type_fits(digits) and not self._needs_prefix(digits):
            return True
        if digits.startswith(self.code):
            for rest in self._stripped(digits[len(self.code) :]):
                nsns += self._stripped(rest)
        return any(map(self._type_fits, nsns))

    def _stripped(self, number: str, head: re.Match[str] | None = None) -> list[str]:
        """`number` and what `_maybe_strip_national_prefix_carrier_code` can make of it."""
        head = head or (self.prefix.match(number) if number and self.prefix else None)
        if head is None:
            return [number]
        if self.rule and head.groups()[-1] is not None:
            return [number, self.prefix.sub(self.rule, number, count=1)]
        return [number, number[head.end() :]]

    def _type_fits(self, nsn: str) -> bool:
        pattern = self.types.get(len(nsn))
        return bool(
            (pattern and pattern.fullmatch(nsn))
            or (self.any_length and self.any_length.fullmatch(nsn))
        )

    def _needs_prefix(self, nsn: str) -> bool:
        """Whether the first format that fits `nsn` needs the national prefix."""
        for leading, pattern, needs in self.formats:
            if (leading is None or leading.match(nsn)) and pattern.fullmatch(nsn):
                return needs
        return False


def _needs_national_prefix(number_format: NumberFormat) -> bool:
    """`_is_national_prefix_present_if_required`'s test of a number's format."""
    rule = number_format.national_prefix_formatting_rule
    return bool(
        rule
        and not number_format.national_prefix_optional_when_formatting
        and not _formatting_rule_has_first_group_only(rule)
    )


@functools.cache
def _region_rules(region: str) -> _RegionRules:
    return _RegionRules(region)


def _phone_at(text: str, start: int, end: int, regions: tuple[str, ...]) -> Span | None:
    """The phone span of `text[start:end]` (trimmed to a digit, `+` or bracket at the start
    and a digit at the end), or None."""
    while start < end and text[start] not in "+(" and not text[start].isdigit():
        start += 1
    while end > start and not text[end - 1].isdigit():
        end -= 1
    if start < end and text[start] == "(" and ")" not in text[start:end]:
        start += 1  # "(01 23 45 67 89": the bracket encloses the number, not part of it
    digits = _NON_DIGIT.sub("", text[start:end])
    if not _PHONE_MIN_DIGITS <= len(digits) <= _PHONE_MAX_DIGITS:
        return None
    extension = _EXTENSION.match(text, end)
    stop = extension.end() if extension else end
    if _touches_word(text, start, stop) or _not_a_phone(text, start, end):
        return None
    if text[start : start + 2].lstrip("(").startswith("+"):
        return (start, stop, "phone") if _valid_number("+" + digits, None) else None
    if any(_valid_number(digits, region) for region in regions):
        return (start, stop, "phone")
    return None


def _phone_cuts(text: str, start: int, end: int) -> Iterator[list[tuple[int, int]]]:
    """The run itself, then its pieces at each of `_PHONE_BREAKS` in turn."""
    yield [(start, end)]
    present = set(text[start:end])
    for pattern, chars in zip(_PHONE_BREAKS, _BREAK_CHARS, strict=True):
        if present.isdisjoint(chars):
            continue
        pieces, last = [], start
        for m in pattern.finditer(text, start, end):
            if m.start() > last:
                pieces.append((last, m.start()))
            last = max(last, m.end())
        if pieces:
            pieces.append((last, end))
            yield pieces


def _phone_runs(text: str, win: _Windows | None) -> list[tuple[int, int]]:
    """(start, end) of each `_PHONE_RUN` match with at least `_PHONE_MIN_DIGITS` digits."""
    if win is not None:
        return win.runs(_PHONE_MIN_DIGITS)
    return [
        m.span()
        for m in _PHONE_RUN.finditer(text)
        if len(m.group()) >= _PHONE_MIN_DIGITS
        and len(_NON_DIGIT.sub("", m.group())) >= _PHONE_MIN_DIGITS
    ]


def _find_phones(text: str, regions: tuple[str, ...], win: _Windows | None = None) -> list[Span]:
    """Phone numbers: each digit run with at least `_PHONE_MIN_DIGITS` digits, whole if
    it is one valid number, else the valid pieces of its first cut that has any."""
    spans = []
    for start, end in _phone_runs(text, win):
        start -= text[start - 1 : start] == "+"  # text[-1:0] is "" at the start
        start -= text[start - 1 : start] == "("
        for pieces in _phone_cuts(text, start, end):
            found = [s for lo, hi in pieces if (s := _phone_at(text, lo, hi, regions))]
            if found:
                spans += found
                break
    return spans


# --- IBANs and cards -------------------------------------------------------------------


def _iban_candidates(text: str, win: _Windows | None = None) -> list[tuple[int, int]]:
    """IBAN-shaped spans (known country, cut at that country's length), checksum unchecked.

    A candidate may run on into the next word, so it is cut at the country's IBAN length
    and the search resumes after the cut (not after the greedy match). In a long text
    the search tries only the starts `win` lists.
    """
    tries = iter(win.iban_starts()) if win else None

    def search(pos: int) -> re.Match[str] | None:
        if tries is None:
            return _IBAN.search(text, pos)
        return next((m for s in tries if s >= pos and (m := _IBAN.match(text, s))), None)

    spans, pos = [], 0
    while m := search(pos):
        length = IBAN_LENGTHS.get(m.group()[:2])
        end, seen = m.start(), 0
        while length and end < m.end() and seen < length:
            seen += text[end] not in _IBAN_SEPARATORS_SET
            end += 1
        if length and seen == length and not (end < len(text) and text[end].isalnum()):
            spans.append((m.start(), end))
            pos = end
        else:
            pos = m.start() + 1
    return spans


_IBAN_SEPARATORS_SET = frozenset(" " + _NBSP)


def _find_ibans(text: str, candidates: list[tuple[int, int]]) -> list[Span]:
    return [(s, e, "iban") for s, e in candidates if iban_is_valid(text[s:e])]


def _find_cards(text: str, ibans: list[tuple[int, int]], win: _Windows | None = None) -> list[Span]:
    """Card-shaped digit runs (`_CARD`) of a known network (`card_network_fits`) that pass
    Luhn, except inside IBAN-shaped text (`ibans`): a mistyped IBAN's 18+ digits pass Luhn
    one time in ten and must not come back as a card number."""
    spans = []
    windows = win.cards() if win else [(0, len(text))]
    for m in (m for lo, hi in windows for m in _CARD.finditer(text, lo, hi)):
        start, end = m.span()
        if any(s <= start and end <= e for s, e in ibans):
            continue
        digits = _NON_CARD_DIGIT.sub("", m.group())
        if card_network_fits(digits) and luhn_is_valid(digits):
            spans.append((start, end, "card"))
    return spans


# --- where matches can be, in long texts ---------------------------------------------------

_FAST_MIN_CHARS = 2048
"""Texts at least this long are searched where `_Windows` says a match can be; shorter ones
whole (the numpy pass costs more than it saves there)."""
_CODE_POINTS = 0x20000
"""Every `\\d` character is below U+20000 (`test_pii.py` checks): `_class_table` has one
entry per code point below, and higher code points read its last entry (no class)."""
_DIGIT, _PHONE_SEP, _DOT, _UPPER, _IPV6_CHAR = 1, 2, 4, 8, 16


@functools.cache
def _class_table() -> np.ndarray:
    """Class bits per code point, each class found by the `re` pattern the finders use."""
    chars = "".join(map(chr, range(_CODE_POINTS)))
    table = np.zeros(_CODE_POINTS, np.uint8)
    classes = (
        (_DIGIT, r"\d"),
        (_PHONE_SEP, f"[{_PHONE_SEPARATORS}]"),
        (_DOT, r"\."),
        (_UPPER, "[A-Z]"),
        (_IPV6_CHAR, r"[0-9A-Fa-f:.]|\d"),
    )
    for bit, pattern in classes:
        table[[m.start() for m in re.finditer(pattern, chars)]] |= bit
    return table


class _Windows:
    """Where matches can be in one text, from one numpy pass over its code points.

    Every match of `_PHONE_RUN` is a run of digits joined by at most three phone
    separators, computed here without a regex. A card number, a phone number and an IPv4
    address join their digits by phone separators too, so each lies inside one such run
    with enough digits (12, 7, 4 and three dots); their patterns run on that run plus the
    two characters their lookaheads read (lookbehinds read before the window by
    themselves). An IBAN starts with two capitals and two digits, so only those places are
    tried. An IPv6 address is made of hex digits, colons, dots and digits and follows none
    of them, so it can only start where a run of these starts, in a run that holds an
    `_IPV6_HINT`. Tried there, in order, the patterns find what they find in the whole
    text.
    """

    def __init__(self, text: str) -> None:
        if text.isascii():  # one byte per character: `bytes.translate` looks the classes up
            table = _class_table()[:256].tobytes()
            classes = np.frombuffer(text.encode("ascii").translate(table), np.uint8)
        else:
            codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
            classes = np.take(_class_table(), codes, mode="clip")
        self.classes = classes  # (n,) uint8 class bits
        self.n = n = len(text)
        self.at = at = np.flatnonzero(classes & _DIGIT)  # (d,) positions of the digits
        # the (up to three) characters after each digit, and whether they join it to the next
        gap = np.diff(at) - 1
        after = [classes[np.minimum(at[:-1] + k, n - 1)] for k in (1, 2, 3)]
        seps = [(c & _PHONE_SEP) != 0 for c in after]
        joined = (gap == 0) | ((gap == 1) & seps[0]) | ((gap == 2) & seps[0] & seps[1])
        joined |= (gap == 3) & seps[0] & seps[1] & seps[2]
        dots = sum(((c & _DOT) != 0) & (gap > k) for k, c in enumerate(after)) * joined
        cut = np.flatnonzero(~joined)
        first = np.concatenate(([0], cut + 1))[: len(cut) + (len(at) > 0)]
        last = np.concatenate((cut, [len(at) - 1]))[: len(first)]
        # one entry per run: first digit, end (after the last digit), digits, dots
        self.start, self.end = at[first], at[last] + 1
        self.digits = last - first + 1
        dots_before = np.concatenate(([0], np.cumsum(dots)))  # dots in the joins before each digit
        self.dots = dots_before[last] - dots_before[first]

    def runs(self, min_digits: int) -> list[tuple[int, int]]:
        """(start, end) of the `_PHONE_RUN` matches with at least `min_digits` digits."""
        keep = self.digits >= min_digits
        return list(zip(self.start[keep].tolist(), self.end[keep].tolist(), strict=True))

    def _padded(self, keep: np.ndarray) -> list[tuple[int, int]]:
        ends = np.minimum(self.end[keep] + 2, self.n)
        return list(zip(self.start[keep].tolist(), ends.tolist(), strict=True))

    def cards(self) -> list[tuple[int, int]]:
        return self._padded(self.digits >= 12)

    def ipv4(self) -> list[tuple[int, int]]:
        return self._padded((self.digits >= 4) & (self.dots >= 3))

    def iban_starts(self) -> list[int]:
        """Starts of two capitals followed by two digits."""
        at = self.at[1:][(np.diff(self.at) == 1) & (self.at[:-1] >= 2)] - 1  # first of two digits
        upper = (self.classes[at - 1] & self.classes[at - 2] & _UPPER) != 0
        return (at[upper] - 2).tolist()

    def ipv6_starts(self, text: str) -> list[int]:
        """Starts of the runs of `_IPV6_CHAR` characters that hold an `_IPV6_HINT`."""
        chars = (self.classes & _IPV6_CHAR) != 0
        starts = np.flatnonzero(chars & ~np.concatenate(([False], chars[:-1])))
        hints = [m.start() for m in _IPV6_HINT.finditer(text)]  # each in a run, after its start
        return np.unique(starts[np.searchsorted(starts, hints, "right") - 1]).tolist()


# --- all types ---------------------------------------------------------------------------

_TYPE_RANK = {t: i for i, t in enumerate(PII_TYPES)}


def _non_overlapping(candidates: list[Span]) -> list[Span]:
    """Longest first, then `PII_TYPES` order, then leftmost; a span is kept if it overlaps
    no kept span. The kept spans never overlap, so they stay sorted by start and end alike
    and only the two neighbours of a new span's place need checking (log time, not a scan
    of every kept span)."""
    candidates = sorted(candidates, key=lambda s: (s[0] - s[1], _TYPE_RANK[s[2]], s[0]))
    starts: list[int] = []
    chosen: list[Span] = []
    for span in candidates:
        i = bisect.bisect_left(starts, span[0])
        if i > 0 and chosen[i - 1][1] > span[0]:
            continue
        if i < len(chosen) and chosen[i][0] < span[1]:
            continue
        starts.insert(i, span[0])
        chosen.insert(i, span)
    return chosen


def find_pii(text: str, cfg: PIIConfig, lang: str | None = None) -> list[Span]:
    """All non-overlapping PII spans of `text` (a document in `lang`, if known), sorted by
    start.

    Overlaps are resolved longest first, then by `PII_TYPES` order, then leftmost, so the
    result does not depend on the order the finders ran in. IBAN candidates are found once
    and shared by the IBAN and card finders.
    """
    types = cfg.types
    win = _Windows(text) if len(text) >= _FAST_MIN_CHARS else None
    ibans = _iban_candidates(text, win) if "iban" in types or "card" in types else []
    candidates: list[Span] = []
    if "email" in types:
        candidates += _find_emails(text)
    if "iban" in types:
        candidates += _find_ibans(text, ibans)
    if "card" in types:
        candidates += _find_cards(text, ibans, win)
    if "ip" in types:
        candidates += _find_ips(text, win)
    if "phone" in types:
        candidates += _find_phones(text, regions_for(lang, cfg.regions), win)
    return _non_overlapping(candidates)


def redact(text: str, cfg: PIIConfig, lang: str | None = None) -> tuple[str, dict[str, int]]:
    """Replace every PII span of a document (in `lang`, if known) by its placeholder.

    Returns the redacted text and the number of redactions per type, with a zero entry for
    each enabled type (so counters sum cleanly across rows).
    """
    counts = dict.fromkeys(cfg.types, 0)
    pieces, last = [], 0
    for start, end, kind in find_pii(text, cfg, lang):
        pieces += [text[last:start], cfg.placeholders[kind]]
        counts[kind] += 1
        last = end
    pieces.append(text[last:])
    return "".join(pieces), counts

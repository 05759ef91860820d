"""PII redaction for the corpus pipeline: emails, public IPs, phones, IBANs, card numbers.

Common Corpus says only that PII was removed with "custom procedures for multilingual
data" (the tooling is not public, see `shared/methods/corpus.md` 1.3), so we follow the
datatrove practice (`PIIFormatter`): find spans with cheap patterns, replace each span by a
typed placeholder such as `<EMAIL>`, and count the redactions per type so the datasheet can
report them. Unlike plain regexes, every candidate except emails is *validated* before it is
redacted, so numbers that only look like PII (dates, invoice ids, version strings) survive:

- emails: a conservative ASCII address pattern (no validation possible offline);
- IP addresses: IPv4 and IPv6 candidates parsed by `ipaddress`; only *public* (globally
  routable) addresses are redacted. Private (10/8, 192.168/16, fc00::/7), loopback,
  link-local, documentation (192.0.2.0/24, 2001:db8::/32) and other reserved ranges are
  kept: they identify nobody, and code/docs are full of them. A four-part version string
  such as 1.2.3.4 is also a public address and is redacted (accepted false positive);
- phone numbers: `phonenumbers.PhoneNumberMatcher` with `Leniency.VALID` (the number must
  be a valid number of its region per libphonenumber's metadata) for each region in
  `PIIConfig.regions`; numbers written with `+` and a country code match in any region;
- IBANs: the ISO 13616 country length table plus the mod-97 checksum (remainder 1);
- payment cards: 13-19 digits (single spaces or hyphens allowed between digits), a first
  digit 2-6 (the card networks' major industry identifiers) and the Luhn checksum.

Overlapping matches (an IBAN's digits also look like a phone number) are resolved
deterministically: the longest span wins, then the type order of `PII_TYPES`, then the
leftmost start. `redact` is pure Python (no Ray) so a Ray Data `map_batches` step can call
it per row.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

import phonenumbers

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

LANGUAGE_REGIONS = {"en": ("US", "GB"), "fr": ("FR",), "de": ("DE",), "es": ("ES",),
                    "it": ("IT",), "nl": ("NL",), "ja": ("JP",)}  # fmt: skip
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
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\w|\.\d)")
_IPV6 = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?(?![\w:])"
)
# Country code, check digits, then 11-30 alphanumerics optionally separated by single spaces;
# the country's length decides where the IBAN really ends (see `_find_ibans`).
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}")
_CARD = re.compile(r"(?<![\d-])[2-6](?:[ -]?\d){12,18}(?!\d)")


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
    compact = iban.replace(" ", "").upper()
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


def _find_emails(text: str) -> list[Span]:
    return [(m.start(), m.end(), "email") for m in _EMAIL.finditer(text)]


def _find_ips(text: str) -> list[Span]:
    spans = []
    for pattern in (_IPV4, _IPV6):
        for m in pattern.finditer(text):
            try:
                address = ipaddress.ip_address(m.group())
            except ValueError:
                continue  # 999.1.1.1, a clock time 10:30:00, ...
            if address.is_global:  # private / loopback / reserved are kept on purpose
                spans.append((m.start(), m.end(), "ip"))
    return spans


_PHONE_SHAPE = re.compile(r"[+(]?\d(?:[\d \t().\-/]{4,24})\d")
"""A run of digits and phone separators with at least 6 characters."""
_PHONE_MIN_DIGITS = 7
"""Fewer digits are never redacted as a phone: the shortest numbers `phonenumbers` calls
valid in `DEFAULT_REGIONS` are local numbers without an area code, which identify no one
and which source code and tables are full of (a simplification; name it in results)."""
_PHONE_CONTEXT = 24


def _phone_windows(text: str) -> list[tuple[int, int]]:
    """Merged windows of `_PHONE_CONTEXT` characters around phone-shaped runs: the only
    places `PhoneNumberMatcher` is run, because running it over a whole document per region
    costs about as much as all other steps together and almost all text has no digit run."""
    windows: list[tuple[int, int]] = []
    for m in _PHONE_SHAPE.finditer(text):
        if sum(c.isdigit() for c in m.group()) < _PHONE_MIN_DIGITS:
            continue
        lo, hi = max(0, m.start() - _PHONE_CONTEXT), min(len(text), m.end() + _PHONE_CONTEXT)
        if windows and lo <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(hi, windows[-1][1]))
        else:
            windows.append((lo, hi))
    return windows


def _find_phones(text: str, regions: tuple[str, ...]) -> list[Span]:
    spans = set()
    for lo, hi in _phone_windows(text):
        window = text[lo:hi]
        for region in regions:
            for m in phonenumbers.PhoneNumberMatcher(
                window, region, leniency=phonenumbers.Leniency.VALID
            ):
                spans.add((lo + m.start, lo + m.end, "phone"))
    return sorted(spans)


def _iban_candidates(text: str) -> list[tuple[int, int]]:
    """IBAN-shaped spans (known country, cut at that country's length), checksum unchecked.

    A candidate may run on into the next word, so it is cut at the country's IBAN length
    and the search resumes after the cut (not after the greedy match).
    """
    spans, pos = [], 0
    while m := _IBAN.search(text, pos):
        length = IBAN_LENGTHS.get(m.group()[:2])
        end, seen = m.start(), 0
        while length and end < m.end() and seen < length:
            seen += text[end] != " "
            end += 1
        if length and seen == length and not (end < len(text) and text[end].isalnum()):
            spans.append((m.start(), end))
            pos = end
        else:
            pos = m.start() + 1
    return spans


def _find_ibans(text: str) -> list[Span]:
    return [(s, e, "iban") for s, e in _iban_candidates(text) if iban_is_valid(text[s:e])]


def _find_cards(text: str) -> list[Span]:
    """Luhn-valid digit runs, except inside IBAN-shaped text: a mistyped IBAN's 18+ digits
    pass Luhn one time in ten and must not come back as a card number."""
    ibans = _iban_candidates(text)
    spans = []
    for m in _CARD.finditer(text):
        if any(s <= m.start() and m.end() <= e for s, e in ibans):
            continue
        digits = re.sub(r"[ -]", "", m.group())
        if 13 <= len(digits) <= 19 and luhn_is_valid(digits):
            spans.append((m.start(), m.end(), "card"))
    return spans


def find_pii(text: str, cfg: PIIConfig, lang: str | None = None) -> list[Span]:
    """All non-overlapping PII spans of `text` (a document in `lang`, if known), sorted by
    start.

    Overlaps are resolved longest first, then by `PII_TYPES` order, then leftmost, so the
    result does not depend on the order the finders ran in.
    """
    finders = {
        "email": lambda: _find_emails(text),
        "ip": lambda: _find_ips(text),
        "phone": lambda: _find_phones(text, regions_for(lang, cfg.regions)),
        "iban": lambda: _find_ibans(text),
        "card": lambda: _find_cards(text),
    }
    candidates = [span for t in cfg.types for span in finders[t]()]
    candidates.sort(key=lambda s: (s[0] - s[1], PII_TYPES.index(s[2]), s[0]))
    chosen: list[Span] = []
    for start, end, kind in candidates:
        if all(end <= s or start >= e for s, e, _ in chosen):
            chosen.append((start, end, kind))
    return sorted(chosen)


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

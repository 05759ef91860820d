"""PII redaction on hand-made multilingual text: validated spans redacted, look-alikes kept."""

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

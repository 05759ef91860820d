"""PIIRedaction step: text replaced in place, per-type counts, never drops."""

from rayworks.pipelines.corpus.pii import PIIConfig
from rayworks.pipelines.corpus.pii_step import PIIRedaction, PIIRedactionConfig
from rayworks.pipelines.corpus.step import DROP, drop


def test_redacts_in_place_with_counts_and_keeps_rows() -> None:
    texts = [
        "Écrivez à marie.dupont@exemple.fr ou au +33 1 23 45 67 89.",
        "Server 8.8.8.8 and 192.168.1.1; mail ops@example.com twice: ops@example.com",
        "東京の天気は晴れです。",
    ]
    batch = drop({"text": texts, "id": [1, 2, 3]}, ["", "gopher:min_words", ""])
    out = PIIRedaction()(batch)
    assert list(out["text"]) == [
        "Écrivez à <EMAIL> ou au <PHONE>.",
        "Server <IP_ADDRESS> and 192.168.1.1; mail <EMAIL> twice: <EMAIL>",
        "東京の天気は晴れです。",
    ]
    assert list(out["pii_email"]) == [1, 2, 0] and list(out["pii_phone"]) == [1, 0, 0]
    assert list(out["pii_ip"]) == [0, 1, 0] and list(out["pii_iban"]) == [0, 0, 0]
    assert list(out[DROP]) == ["", "gopher:min_words", ""]  # unchanged: never drops
    assert list(out["id"]) == [1, 2, 3]


def test_only_enabled_types_get_columns() -> None:
    cfg = PIIRedactionConfig(pii=PIIConfig(types=("email",)))
    out = PIIRedaction(cfg)({"text": ["a@b.org, +33 1 23 45 67 89"]})
    assert list(out["text"]) == ["<EMAIL>, +33 1 23 45 67 89"]
    assert [k for k in out if k.startswith("pii_")] == ["pii_email"]
    assert DROP not in out

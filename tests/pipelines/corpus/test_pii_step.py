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


def test_meta_and_license_evidence_are_redacted_and_counted() -> None:
    """`meta` and `license_evidence` are written out with the row; before commit c69a4a6
    they kept their addresses. Counts are the row's, text and fields together."""
    import json

    meta = json.dumps(
        {
            "authors": ["Élodie Dupont <élodie.dupont@exemple.fr>", "J. Doe"],
            "contact": {"tel": "+33 1 23 45 67 89", "year": 2004},
            "title": "Notes",
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    batch = {
        "text": ["Voir le site.", "Mail ops@example.com"],
        "lang": ["fr", "en"],
        "license_evidence": ["Copyright: 2003 John Doe <john@example.org>", None],
        "meta": [meta, None],
    }
    out = PIIRedaction()(batch)
    assert list(out["text"]) == ["Voir le site.", "Mail <EMAIL>"]
    assert list(out["license_evidence"]) == ["Copyright: 2003 John Doe <<EMAIL>>", None]
    assert json.loads(out["meta"][0]) == {
        "authors": ["Élodie Dupont <<EMAIL>>", "J. Doe"],
        "contact": {"tel": "<PHONE>", "year": 2004},
        "title": "Notes",
    }
    assert out["meta"][1] is None
    assert list(out["pii_email"]) == [2, 1] and list(out["pii_phone"]) == [1, 0]


def test_meta_without_pii_keeps_its_exact_string() -> None:
    from rayworks.pipelines.corpus.pii_step import redact_meta

    meta = '{"title": "Notes",  "n": 1}'  # not as json.dumps writes it
    out, counts = redact_meta(meta, PIIConfig())
    assert out is meta and sum(counts.values()) == 0
    out, counts = redact_meta("free text: a@b.org", PIIConfig())  # not JSON: as text
    assert out == "free text: <EMAIL>" and counts["email"] == 1
    assert redact_meta(None, PIIConfig())[0] is None


def test_fields_can_be_turned_off() -> None:
    cfg = PIIRedactionConfig(text_fields=(), json_fields=())
    batch = {"text": ["x"], "license_evidence": ["a@b.org"], "meta": ['{"m": "a@b.org"}']}
    out = PIIRedaction(cfg)(batch)
    assert list(out["license_evidence"]) == ["a@b.org"] and list(out["pii_email"]) == [0]


def test_rejects_raw_text_is_redacted_keeping_the_table() -> None:
    import pyarrow as pa

    from rayworks.pipelines.corpus.pii_step import redact_rejects
    from rayworks.pipelines.corpus.schema import REJECT_FIELDS

    rejects = pa.table(
        {
            "source_path": ["a.jsonl", "a.jsonl", "b.txt"],
            "line": [3, 7, None],
            "reason": ["json:invalid", "field:missing_text", "utf8:invalid"],
            "raw": ['{"text": "mail me: jo@example.com, +49 30 12345678', None, "8.8.8.8 \\xff"],
        }
    )
    out = redact_rejects(rejects)
    assert out.column_names == list(REJECT_FIELDS) and out.schema == rejects.schema
    assert out["raw"].to_pylist() == [
        '{"text": "mail me: <EMAIL>, <PHONE>',
        None,
        "<IP_ADDRESS> \\xff",
    ]
    assert out.select(["source_path", "line", "reason"]) == rejects.select(
        ["source_path", "line", "reason"]
    )
    # the reader's layout names the column `reject_raw`
    read = rejects.rename_columns(["source_path", "line", "reject_reason", "reject_raw"])
    assert redact_rejects(read, column="reject_raw")["reject_raw"][0].as_py().count("<") == 2
    assert redact_rejects(rejects.slice(0, 0)).num_rows == 0

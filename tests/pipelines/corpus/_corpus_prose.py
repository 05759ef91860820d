"""Synthetic English prose for the corpus run tests: passes every quality rule, so what a
test's rows meet is what the test built in (a duplicate, a license, a short row)."""

from __future__ import annotations

import random

NOUNS = (
    "river",
    "garden",
    "teacher",
    "village",
    "market",
    "window",
    "harbor",
    "student",
    "forest",
    "engine",
    "letter",
    "bridge",
    "mountain",
    "kitchen",
    "doctor",
    "library",
    "painter",
    "farmer",
    "island",
    "castle",
)
VERBS = (
    "watched",
    "carried",
    "followed",
    "painted",
    "visited",
    "repaired",
    "described",
    "opened",
    "measured",
)
ADJS = (
    "quiet",
    "ancient",
    "bright",
    "narrow",
    "careful",
    "distant",
    "modest",
    "heavy",
    "gentle",
    "curious",
)
EMAIL = "jane.doe@example.org"


def prose(seed: int, sentences: int = 8) -> str:
    """English prose that passes Gopher, repetition and C4 (eight varied sentences)."""
    rng = random.Random(seed)
    pick = rng.choice
    return "\n".join(
        f"The {pick(ADJS)} {pick(NOUNS)} {pick(VERBS)} the {pick(NOUNS)} of the "
        f"{pick(ADJS)} {pick(NOUNS)} with a {pick(NOUNS)}."
        for _ in range(sentences)
    )


def near_copy(text: str) -> str:
    """`text` with its fourth word replaced: 5-shingle Jaccard ~0.9 with the original."""
    words = text.split(" ")
    words[3] = "zeppelin"
    return " ".join(words)

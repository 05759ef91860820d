"""Generated text, one token at a time, at a cost per token that does not grow with the text.

`IncrementalDecoder` decodes only a short window of recent ids per token (the scheme of
vLLM's `detokenize_incrementally`: decode `ids[prefix:]` and keep what extends the decode
of `ids[prefix:read]`), instead of re-decoding every id generated so far.
`StopMatcher` streams that text through one Knuth-Morris-Pratt automaton per stop string:
each new character costs amortised O(1) per stop string, and the automaton's state is the
longest prefix of a stop string the text currently ends with — exactly the text that must
be held back. Scanning every prefix of every stop string against the whole text on every
token (what this replaced) let one 100 KB stop string pin a replica for hours.
`TextRow` is one generated choice: both, plus the finish reason and held-back logprobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayworks.platform.logprobs import TokenLogprob

REPLACEMENT = "\ufffd"  # what a decoder shows for an incomplete UTF-8 sequence


class IncrementalDecoder:
    """Token ids in, newly settled text out; the pieces add up to `decode(all ids)`."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.ids: list[int] = []
        self.prefix = 0  # ids[prefix:read] were decoded last time, as context for the next
        self.read = 0

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def push(self, token: int) -> str:
        """Add one id; return the text it settles ("" while a character is incomplete)."""
        self.ids.append(token)
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            self.prefix, self.read = self.read, len(self.ids)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """The text of ids not yet settled (an incomplete character shows as U+FFFD)."""
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return after[len(before) :]


def prefix_function(s: str) -> list[int]:
    """KMP failure table: `pi[i]` is the length of the longest proper prefix of `s[:i+1]`
    that is also its suffix."""
    pi = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = pi[k - 1]
        if s[i] == s[k]:
            k += 1
        pi[i] = k
    return pi


class StopMatcher:
    """Finds the first stop string in streamed text; says how much of its tail to hold."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.tables = [prefix_function(s) for s in self.stops]
        self.states = [0] * len(self.stops)  # matched prefix length per stop string
        self.seen = 0  # characters fed so far

    def feed(self, text: str) -> int | None:
        """Feed the next characters; return the start (in all text fed) of the first stop
        string completed by them, or None. Among stops completed at the same character,
        the one that starts first wins."""
        for ch in text:
            self.seen += 1
            found = None
            for i, (stop, table) in enumerate(zip(self.stops, self.tables, strict=True)):
                k = self.states[i]
                if k == len(stop):
                    k = table[k - 1]
                while k and stop[k] != ch:
                    k = table[k - 1]
                if stop[k] == ch:
                    k += 1
                self.states[i] = k
                if k == len(stop):
                    start = self.seen - k
                    found = start if found is None else min(found, start)
            if found is not None:
                return found
        return None

    @property
    def hold(self) -> int:
        """Characters at the end of the text that may still begin a stop string."""
        return max(self.states, default=0)


class TextRow:
    """Incremental detokenisation of one choice: stop strings, held-back text, finish reason.

    Text that could still become a stop string (or an incomplete UTF-8 character) is held
    back, so the streamed pieces add up to exactly the non-streamed text. Per token, only a
    short window of ids is decoded and only the new characters are matched against the stop
    strings (`text_stream.py`), so the cost per token does not grow with the text or with a
    stop string's length.
    """

    def __init__(self, tok: Any, eos: set[int], stop: list[str], limit: int) -> None:
        self.eos, self.limit = eos, limit
        self.decoder = IncrementalDecoder(tok)
        self.matcher = StopMatcher(stop)
        self.text, self.emitted, self.n_tokens = "", 0, 0
        self.finish: str | None = None
        self.logprobs: list[TokenLogprob] = []  # of the tokens whose text was released
        self.pending: list[TokenLogprob] = []  # of tokens pushed since the last release

    def push(self, token: int) -> str:
        """Add one generated token; return the text that became safe to send."""
        self.n_tokens += 1
        if token in self.eos:
            self.finish = "stop"
            self._extend(self.decoder.flush())
            return self._take(len(self.text))
        self._extend(self.decoder.push(token))
        if self.finish is None and self.n_tokens >= self.limit:
            self._extend(self.decoder.flush())
            self.finish = self.finish or "length"
        if self.finish:
            return self._take(len(self.text))
        return self._take(len(self.text) - self.matcher.hold)

    def _extend(self, piece: str) -> None:
        """Append decoded text; on a completed stop string cut the text where it starts."""
        if not piece or self.finish:
            return
        start = self.matcher.feed(piece)
        self.text += piece
        if start is not None:
            self.text, self.finish = self.text[:start], "stop"

    def _take(self, upto: int) -> str:
        piece = self.text[self.emitted : upto]
        self.emitted = max(self.emitted, upto)
        return piece

    def release(self) -> list[TokenLogprob]:
        """The pending logprobs, moved to `logprobs`: they go out with the text sent now."""
        out, self.pending = self.pending, []
        self.logprobs += out
        return out

"""RULER-like synthetic long-context tasks with exact answers, and their word-level tokenizer.

Every example is a prompt `<s> CONTEXT Q QUERY` and a multi-token answer ending in `</s>`,
so accuracy is exact match. The tasks (RULER names in brackets; sizes reconstructed for a CPU):

- `recall` [niah_multikey / multivalue]: records `k v1..vL ;` with distinct keys, as many
  as fit the context and the value vocabulary (with 64 value tokens and L = 6, 9 records;
  filler words between them fill the rest of a longer context, format 4), query `Q k`,
  answer `v1..vL`. Value length
  L = 8 so the answer needs context the question window does not point at (methods file,
  design note).
- `niah` [niah_single / multikey]: filler words with one needle `k v1..vL ;` and
  `n_distractors` needles of other keys at random places; query and answer as in `recall`.
- `vt` [variable tracking / chain following]: `n_chains` chains `xa = nC ; xb = xa ; ...` of
  `chain_len` assignments, interleaved with filler; query `Q nC`, answer the chain's
  variables in order.
- `cwe` [common-word extraction / counting]: a word list where three words occur
  `cwe_counts` times and the others at most `cwe_rare` times; query `Q count`, answer the
  three frequent words, most frequent first.

Contexts are sized by `context_len` (tokens, approximately).

The answer starts right after the query token, with no answer marker (reconstructed). With
a marker (`Q k A`) the first value token is predicted one token after the key, so the
lookup needs a previous-token head at the query as well; 4-layer d 128 targets learned to
copy value tokens 2-6 within 4000 CPU steps but left the first one at chance among the
context's values (attention spread over every record's first value). Without it the first
token is plain induction (docs/speckv.md, "Answer marker").

Keys are drawn from the value tokens `v*` (format 3, reconstructed): every token of a
record is distinct in its context, and the key is just the record's first token. With keys
from a separate `k*` vocabulary that the models never predict, the tied embeddings of the
keys drifted toward one shared direction (softmax gradients push every never-target
token's output embedding the same way), and 4-layer targets copied values perfectly but
picked the record at chance; with keys that are also prediction targets the same target
solves 128-token recall and niah (docs/speckv.md, "Keys from the value vocabulary"). In a
pretrained LLM every token is a prediction target, so this is the closer setting.
`FORMAT` enters the model cache key, so models trained on another format are not reused.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, model_validator
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rayworks.core.config import Config

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SYMBOLS = [";", "=", "Q", "count"]
FORMAT = 4  # prompt format (2: no answer marker; 3: keys are value tokens; 4: recall records
# among filler), in the cache key
N_EACH = 32  # variables x*, numbers n*, filler words w*
N_VALUES = 64  # values v*: every value token occurs once per context (see `_values`)
TASKS = ("recall", "niah", "vt", "cwe")


def vocabulary() -> list[str]:
    """Every token, special ones first (<pad>=0, <s>=1, </s>=2, <unk>=3)."""
    words = [f"{p}{i}" for p in "xnw" for i in range(N_EACH)]
    return [PAD, BOS, EOS, UNK, *SYMBOLS, *words, *(f"v{i}" for i in range(N_VALUES))]


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over `vocabulary()` with a whitespace pre-tokenizer (HF format)."""
    vocab = {tok: i for i, tok in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )


class TaskConfig(Config):
    """Synthetic task mix and sizes (reconstructed from the methods file's CPU recipe)."""

    tasks: list[str] = Field(list(TASKS), min_length=1, description=f"task mix, from {TASKS}")
    context_len: int = Field(230, ge=32, le=4096, description="approximate context tokens")
    value_len: int = Field(8, ge=1, le=16, description="tokens per value (answer length)")
    n_distractors: int = Field(2, ge=0, description="niah: needles with other keys")
    n_chains: int = Field(4, ge=1, le=8, description="vt: chains (4 in the methods file)")
    chain_len: int = Field(4, ge=2, le=8, description="vt: assignments per chain")
    cwe_counts: list[int] = Field(
        [16, 13, 10], description="cwe: counts of the 3 frequent words, largest first"
    )
    cwe_rare: int = Field(6, ge=1, description="cwe: most occurrences of any other word")

    @model_validator(mode="after")
    def _check(self) -> TaskConfig:
        bad = [t for t in self.tasks if t not in TASKS]
        if bad:
            raise ValueError(f"tasks: unknown task(s) {bad}; allowed: {list(TASKS)}")
        counts = self.cwe_counts
        if len(counts) != 3 or sorted(set(counts), reverse=True) != counts:
            raise ValueError(f"cwe_counts={counts} must be 3 distinct counts, largest first")
        if counts[-1] <= self.cwe_rare:
            raise ValueError(f"cwe_counts={counts} must exceed cwe_rare={self.cwe_rare}")
        need = (1 + self.n_distractors) * (self.value_len + 1)
        if "niah" in self.tasks and need > N_VALUES:
            raise ValueError(
                f"n_distractors={self.n_distractors}, value_len={self.value_len}: niah needs "
                f"{need} distinct value tokens (key + values per needle), there are {N_VALUES}"
            )
        return self


@dataclass(frozen=True)
class Example:
    task: str
    prompt: list[str]  # starts with <s>, ends with `Q QUERY`
    answer: list[str]  # ends with </s>

    @property
    def text(self) -> str:
        return " ".join(self.prompt[1:])


def _words(rng: random.Random, prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in rng.sample(range(N_EACH), n)]


def _values(rng: random.Random, n_records: int, cfg: TaskConfig) -> list[list[str]]:
    """Value tokens drawn without replacement: no value token repeats inside a context, so
    copying a value is plain induction (find the previous token, copy its successor) rather
    than ambiguous bigram matching (reconstructed)."""
    flat = [f"v{i}" for i in rng.sample(range(N_VALUES), n_records * cfg.value_len)]
    return [flat[i * cfg.value_len : (i + 1) * cfg.value_len] for i in range(n_records)]


def _records(n: int, rng: random.Random, cfg: TaskConfig) -> list[list[str]]:
    """`n` records `k v1..vL ;` whose key and values are distinct value tokens."""
    wide = cfg.model_copy(update={"value_len": cfg.value_len + 1})
    return [[*toks, ";"] for toks in _values(rng, n, wide)]


def record_keys(context: list[str]) -> list[str]:
    """The keys of a retrieval context: value tokens that start a run of value tokens."""
    return [
        t
        for i, t in enumerate(context)
        if t.startswith("v") and (i == 0 or not context[i - 1].startswith("v"))
    ]


def recall(cfg: TaskConfig, rng: random.Random) -> Example:
    """As many records as fit the context and the value vocabulary; when they do not fill
    the context (over 64 tokens at value length 6), the rest is filler words between
    them (format 4), so the prompt keeps `context_len` tokens."""
    n = max(2, min(cfg.context_len // (cfg.value_len + 2), N_VALUES // (cfg.value_len + 1)))
    records = _records(n, rng, cfg)
    target = rng.choice(records)
    filler = max(0, cfg.context_len - sum(map(len, records)))
    context = _interleave(rng, records, filler)
    return Example("recall", [BOS, *context, "Q", target[0]], [*target[1:-1], EOS])


def _interleave(rng: random.Random, groups: list[list[str]], filler: int) -> list[str]:
    """Groups in order, each at a random place among `filler` filler words."""
    slots = sorted(rng.randrange(filler + 1) for _ in groups)
    out: list[str] = []
    prev = 0
    for slot, group in zip(slots, groups, strict=True):
        out += [f"w{rng.randrange(N_EACH)}" for _ in range(slot - prev)] + group
        prev = slot
    return out + [f"w{rng.randrange(N_EACH)}" for _ in range(filler - prev)]


def niah(cfg: TaskConfig, rng: random.Random) -> Example:
    needles = _records(1 + cfg.n_distractors, rng, cfg)
    target = needles[0]
    rng.shuffle(needles)
    filler = max(0, cfg.context_len - sum(map(len, needles)))
    context = _interleave(rng, needles, filler)
    return Example("niah", [BOS, *context, "Q", target[0]], [*target[1:-1], EOS])


def vt(cfg: TaskConfig, rng: random.Random) -> Example:
    names = _words(rng, "x", cfg.n_chains * cfg.chain_len)
    numbers = _words(rng, "n", cfg.n_chains)
    chains = [names[c * cfg.chain_len : (c + 1) * cfg.chain_len] for c in range(cfg.n_chains)]
    steps = []  # (chain, assignment) in an interleaving that keeps each chain's order
    order = [c for c in range(cfg.n_chains) for _ in range(cfg.chain_len)]
    rng.shuffle(order)
    done = [0] * cfg.n_chains
    for c in order:
        i = done[c]
        rhs = numbers[c] if i == 0 else chains[c][i - 1]
        steps.append([chains[c][i], "=", rhs, ";"])
        done[c] += 1
    filler = max(0, cfg.context_len - 4 * len(steps))
    context = _interleave(rng, steps, filler)
    pick = rng.randrange(cfg.n_chains)
    return Example("vt", [BOS, *context, "Q", numbers[pick]], [*chains[pick], EOS])


def cwe(cfg: TaskConfig, rng: random.Random) -> Example:
    vocab = _words(rng, "w", N_EACH)
    common, rare = vocab[:3], vocab[3:]
    words = [w for w, c in zip(common, cfg.cwe_counts, strict=True) for _ in range(c)]
    pool = [w for w in rare for _ in range(cfg.cwe_rare)]
    rng.shuffle(pool)
    words += pool[: max(0, cfg.context_len - len(words))]
    rng.shuffle(words)
    return Example("cwe", [BOS, *words, "Q", "count"], [*common, EOS])


GENERATORS = {"recall": recall, "niah": niah, "vt": vt, "cwe": cwe}


def solve(ex: Example, query: str, cfg: TaskConfig) -> list[str]:
    """The answer (with `</s>`) to `Q query` on `ex`'s context, read off the context alone.

    Retrieval: the `value_len` tokens after the key; vt: follow the chain from the number;
    cwe: only its own query (`count`) has an answer."""
    ctx = ex.prompt[1:-2]
    if ex.task in ("recall", "niah"):
        i = ctx.index(query)
        return [*ctx[i + 1 : i + 1 + cfg.value_len], EOS]
    if ex.task == "vt":
        chain, rhs = [], query
        for _ in range(cfg.chain_len):
            j = next(j for j in range(2, len(ctx)) if ctx[j] == rhs and ctx[j - 1] == "=")
            rhs = ctx[j - 2]
            chain.append(rhs)
        return [*chain, EOS]
    return list(ex.answer)


def training_tokens(
    ex: Example, cfg: TaskConfig, n_queries: int, rng: random.Random
) -> tuple[list[str], list[bool]]:
    """`ex` plus up to `n_queries - 1` more `Q key answer` queries on the same context
    (every key / chain number of the context is fair game), with the mask of answer tokens.

    Training only (reconstructed, after multi-query associative recall): many supervised
    answers per context make the retrieval circuit form within a CPU budget."""
    tokens, mask = [*ex.prompt, *ex.answer], [False] * len(ex.prompt) + [True] * len(ex.answer)
    if ex.task == "cwe" or n_queries <= 1:
        return tokens, mask
    ctx, asked = ex.prompt[1:-2], ex.prompt[-1]
    keys = [t for t in ctx if t.startswith("n")] if ex.task == "vt" else record_keys(ctx)
    others = sorted(set(keys) - {asked})
    for q in rng.sample(others, min(n_queries - 1, len(others))):
        ans = solve(ex, q, cfg)
        tokens += ["Q", q, *ans]
        mask += [False] * 2 + [True] * len(ans)
    return tokens, mask


def make_examples(cfg: TaskConfig, n: int, seed: int) -> list[Example]:
    """`n` examples cycling through `cfg.tasks` (balanced), reproducible from `seed`."""
    rng = random.Random(seed)
    return [GENERATORS[cfg.tasks[i % len(cfg.tasks)]](cfg, rng) for i in range(n)]


def encode(tokenizer: PreTrainedTokenizerFast, words: list[str]) -> list[int]:
    ids = tokenizer.convert_tokens_to_ids(words)
    if tokenizer.unk_token_id in ids:
        raise ValueError(f"unknown token in {words[:8]}...: not in the task vocabulary")
    return ids


def save_tokenizer(folder: Path) -> None:
    make_tokenizer().save_pretrained(folder)

"""Multi-expert progressive annotation, simulated (the paper's construction step 3).

The paper: E1 (Gemini-2.5-Flash) writes QA of four types, E2 (DeepSeek-V3) writes five
distractors and shuffles the six options, E3 (Gemini-2.5-Pro, a different model) flags
each item correct / fixable / invalid against the video, humans fix or delete the flagged
items. VUDG-mini (all reconstructed) replaces each expert by a template that perceives
the scene graph through its own noise:

- a *view* of a question is the set of values that answer it (attribute {colour}, object
  {object}, action {a1, a2}, temporal {"a1>a2"}); an expert with error rate e replaces one
  element by a wrong value of the same type with probability e (`hallucinate`);
- E1 answers from its view (`generator_error`, our recipe's 10%) and passes the view on;
- E2 writes 5 distractors outside E1's view, with `synonym_rate` replacing one by a
  synonym of the answer (a second correct option); shuffles;
- E3-het checks against its own independent view (`verifier_error`); E3-self has its own
  error rate (`self_verifier_error`, by default the same) but starts from E1's view (shared
  error seed: self-reinforcement) with probability `self_shared_view` (recipe 1), else from
  the truth like E3-het. Either one notices a synonym distractor with probability
  `synonym_recall`;
- humans check the flagged items against the true graph: fix (the true value is among the
  options) or delete; unflagged items pass unchanged;
- a final audit against the true graph counts residual label errors per stage.

By construction E3-self cannot see most of E1's errors at `self_shared_view` = 1 (said here
so as not to hide it); the measured gap is reported, not assumed. With `self_shared_view`
= 0 the two branches differ only in their error rates, so the comparison can go either way
(the annotation tests check that it flips when E3-het is the noisier one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rayworks.pipelines.vudg.config import AnnotationConfig
from rayworks.pipelines.vudg.scene import ACTIONS, COLOURS, OBJECTS, SceneGraph

TYPES = ("action", "attribute", "object", "temporal")
N_OPTIONS = 6
PAIRS = tuple(f"{a}>{b}" for a in ACTIONS for b in ACTIONS if a != b)
UNIVERSE = {
    "action": ACTIONS,
    "attribute": tuple(COLOURS),
    "object": tuple(OBJECTS),
    "temporal": PAIRS,
}
TEXT = {
    "left": "moves left",
    "right": "moves right",
    "up": "moves up",
    "down": "moves down",
    "grow": "grows",
    "shrink": "shrinks",
    "spin": "spins",
    "pick_up": "picks up the object",
    "drop": "drops the object",
}
SYNONYM = {
    "left": "goes left",
    "right": "goes right",
    "up": "rises",
    "down": "sinks",
    "grow": "gets bigger",
    "shrink": "gets smaller",
    "spin": "rotates",
    "pick_up": "lifts the object",
    "drop": "lets go of the object",
    "red": "crimson",
    "green": "lime",
    "blue": "navy",
    "yellow": "golden",
    "magenta": "purple",
    "cyan": "turquoise",
    "key": "latchkey",
    "ball": "sphere",
    "box": "crate",
    "cup": "mug",
    "ring": "hoop",
    "flag": "banner",
}
QUESTION = {
    "action": "Which action does the {shape} perform?",
    "attribute": "What colour is the {shape}?",
    "object": "Which object is next to the {shape}?",
    "temporal": "In which order does the {shape} act?",
}
VERDICTS = ("correct", "fixable", "invalid")


def truth(sg: SceneGraph, qtype: str) -> frozenset[str]:
    """The values that answer a question of `qtype` about `sg`."""
    return frozenset(
        {
            "action": sg.actions,
            "attribute": (sg.colour,),
            "object": (sg.object,),
            "temporal": ("{}>{}".format(*sg.actions),),
        }[qtype]
    )


def base(value: str) -> str:
    """A synonym option "~x" means the same as "x"."""
    return value.removeprefix("~")


def option_text(value: str) -> str:
    """Human-readable option; a synonym option reads differently but means the same."""
    if base(value) in PAIRS:
        first, second = base(value).split(">")
        words = SYNONYM if value.startswith("~") else TEXT
        return f"{words[first]}, then {TEXT[second]}"
    if value.startswith("~"):
        return SYNONYM[base(value)]
    return TEXT.get(value, value)


def hallucinate(
    view: frozenset[str], qtype: str, rate: float, rng: np.random.Generator
) -> frozenset[str]:
    """With probability `rate`, replace one value of the view by a wrong one of its type
    (temporal: half the time the reversed order, the typical temporal hallucination)."""
    if rng.random() >= rate:
        return view
    old = sorted(view)[rng.integers(len(view))]
    if qtype == "temporal" and rng.random() < 0.5:
        a, b = old.split(">")
        return frozenset({f"{b}>{a}"})
    pool = [v for v in UNIVERSE[qtype] if v not in view]
    return (view - {old}) | {pool[rng.integers(len(pool))]}


@dataclass
class Item:
    """One multiple-choice item as it moves through the stages."""

    qtype: str
    options: list[str]  # value keys, "~x" = synonym of x
    answer: int
    e1_view: frozenset[str]
    verdict: str = "correct"
    status: str = "kept"  # kept | fixed | deleted
    history: dict[str, bool] = field(default_factory=dict)  # stage -> label correct

    @property
    def answer_value(self) -> str:
        return self.options[self.answer]


def is_correct(item: Item, true_set: frozenset[str]) -> bool:
    """Label correct: the marked option answers the question and no other option does."""
    others = [base(v) for i, v in enumerate(item.options) if i != item.answer]
    marked = item.answer_value
    return not marked.startswith("~") and marked in true_set and not set(others) & true_set


def generate(
    sg: SceneGraph, qtype: str, rate: float, rng: np.random.Generator
) -> tuple[str, frozenset[str]]:
    """E1: its view of the question and the answer it writes."""
    view = hallucinate(truth(sg, qtype), qtype, rate, rng)
    return sorted(view)[rng.integers(len(view))], view


def distract(
    answer: str, view: frozenset[str], qtype: str, synonym_rate: float, rng: np.random.Generator
) -> tuple[list[str], int]:
    """E2: five distractors outside E1's view (temporal: the reversed order first), one
    maybe a synonym of the answer; the six options shuffled. Returns (options, answer)."""
    pool = [v for v in UNIVERSE[qtype] if v not in view]
    chosen: list[str] = []
    if qtype == "temporal":
        a, b = answer.split(">")
        chosen = [f"{b}>{a}"] if f"{b}>{a}" in pool else []
    rest = [v for v in pool if v not in chosen]
    chosen += [rest[i] for i in rng.choice(len(rest), N_OPTIONS - 1 - len(chosen), replace=False)]
    if rng.random() < synonym_rate:
        chosen[rng.integers(len(chosen))] = "~" + answer
    options = [answer, *chosen]
    order = rng.permutation(N_OPTIONS)
    return [options[i] for i in order], int(np.argmin(order))


def verify(item: Item, view: frozenset[str], recall: float, rng: np.random.Generator) -> str:
    """E3: 'correct' when the item checks out against the verifier's view (synonyms noticed
    with probability `recall`), 'fixable' when some option answers it in that view,
    'invalid' otherwise."""
    seen = [base(v) if v.startswith("~") and rng.random() < recall else v for v in item.options]
    others = {v for i, v in enumerate(seen) if i != item.answer}
    if seen[item.answer] in view and not others & view:
        return "correct"
    return "fixable" if set(seen) & view else "invalid"


def human_fix(item: Item, true_set: frozenset[str], rng: np.random.Generator) -> Item:
    """Humans on a flagged item: confirm it, fix it (mark a true option, replace any other
    option that also answers the question) or delete it (no option answers it)."""
    if is_correct(item, true_set):
        return item
    hits = [i for i, v in enumerate(item.options) if v in true_set]
    if not hits:
        return replace(item, status="deleted")
    answer = item.answer if item.answer in hits else hits[0]
    pool = [v for v in UNIVERSE[item.qtype] if v not in true_set and v not in item.options]
    fresh = iter(rng.permutation(pool).tolist())
    options = [
        v if i == answer or base(v) not in true_set else next(fresh)
        for i, v in enumerate(item.options)
    ]
    return replace(item, options=options, answer=answer, status="fixed")


@dataclass(frozen=True)
class ClipAnnotation:
    """Both branches' final items of one clip (het = the dataset's labels)."""

    het: list[Item]
    self: list[Item]


def annotate_clip(sg: SceneGraph, ann: dict, rng: np.random.Generator) -> ClipAnnotation:
    """Run E1 → E2 → {E3-het, E3-self} → humans → audit on one clip's four questions.

    `ann` holds the AnnotationConfig values (missing keys take their defaults). E1 and E2
    run once; both verifier branches see the same items. Each item's `history` records
    label correctness per stage.
    """
    a = AnnotationConfig.model_validate(ann)
    self_error = a.verifier_error if a.self_verifier_error is None else a.self_verifier_error
    streams = rng.spawn(5)  # E1, E2, E3-het, E3-self, humans: independent seeds
    branches: dict[str, list[Item]] = {"het": [], "self": []}
    for qtype in TYPES:
        true_set = truth(sg, qtype)
        answer, e1_view = generate(sg, qtype, a.generator_error, streams[0])
        options, index = distract(answer, e1_view, qtype, a.synonym_rate, streams[1])
        item = Item(qtype, options, index, e1_view)
        item.history = {"E1": answer in true_set, "E2": is_correct(item, true_set)}
        # E3-self's start: E1's view with probability self_shared_view (no draw at 1, so
        # the recipe's stream is the one E3-self always had)
        shared = a.self_shared_view >= 1 or streams[3].random() < a.self_shared_view
        for branch, start, rate, stream in (
            ("het", true_set, a.verifier_error, streams[2]),
            ("self", e1_view if shared else true_set, self_error, streams[3]),
        ):
            view = hallucinate(start, qtype, rate, stream)
            verdict = verify(item, view, a.synonym_recall, stream)
            out = replace(item, verdict=verdict, history=dict(item.history))
            if verdict != "correct":
                out = human_fix(out, true_set, streams[4])
            out.history["final"] = out.status != "deleted" and is_correct(out, true_set)
            branches[branch].append(out)
    return ClipAnnotation(branches["het"], branches["self"])


def stage_report(items: list[Item]) -> dict[str, int]:
    """Residual label errors per stage and what each stage did (counts reconcile:
    items = kept + fixed + deleted; E2 errors = caught + missed; final errors = missed)."""
    flagged = [it for it in items if it.verdict != "correct"]
    wrong_e2 = [it for it in items if not it.history["E2"]]
    caught = sum(1 for it in flagged if not it.history["E2"])
    return {
        "items": len(items),
        "errors_E1": sum(1 for it in items if not it.history["E1"]),
        "errors_E2": len(wrong_e2),
        "flagged": len(flagged),
        "flagged_fixable": sum(1 for it in flagged if it.verdict == "fixable"),
        "flagged_invalid": sum(1 for it in flagged if it.verdict == "invalid"),
        "caught": caught,
        "missed": len(wrong_e2) - caught,
        "false_flags": len(flagged) - caught,
        "kept": sum(1 for it in items if it.status == "kept"),
        "fixed": sum(1 for it in items if it.status == "fixed"),
        "deleted": sum(1 for it in items if it.status == "deleted"),
        "errors_final": sum(
            1 for it in items if it.status != "deleted" and not it.history["final"]
        ),
    }

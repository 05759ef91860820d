"""Verifiers of a user's prompt file (`data.verifier`): `(example, completion) -> score`.

- `exact`: the completion's answer (its first line after the last "A:" when it has that
  marker, else the whole completion), stripped, equals the example's answer, stripped;
- `numeric`: the last number in the completion equals the answer's value (7 == 7.0;
  "1,000" reads as 1000);
- `countdown`: the countdown task's own verifier (tasks/countdown.py): the expression after
  the last "A:" reaches the prompt's target with the prompt's numbers, so the prompt must
  hold "reach T with n1 n2 ..." (any correct expression counts, not just `answer`);
- `module:function`: any importable `(example, completion) -> float` (imported like the
  `python` reward, platform/plugins.py).

A built-in verifier also checks each line when the file is read (`row_problem`): a
numeric answer that is no number, or a countdown prompt without its target, could never
score, so it is a reject with that reason rather than a prompt that silently scores 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from rayworks.core.errors import ConfigError
from rayworks.data.tasks.base import Example, answer_after
from rayworks.data.tasks.countdown import CountdownTask, ParseError, parse_prompt
from rayworks.platform.plugins import import_callable

Verifier = Callable[[Example, str], float]
NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
NOT_A_NUMBER = "answer is not a number (verifier numeric)"
NO_COUNTDOWN_TARGET = "prompt has no 'reach T with n1 n2 ...' (verifier countdown)"


def exact_verifier(example: Example, completion: str) -> float:
    """1.0 iff the answer after the last "A:" (else the whole completion) is the answer."""
    got = answer_after(completion)
    return float((completion if got is None else got).strip() == example.answer.strip())


def number_in(text: str) -> float | None:
    """The value of the last number in `text` (thousands commas dropped), or None."""
    found = NUMBER_RE.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def numeric_answer(answer: str) -> float | None:
    """The answer's value when the whole answer is one number, else None."""
    text = answer.strip()
    return number_in(text) if NUMBER_RE.fullmatch(text) else None


def numeric_verifier(example: Example, completion: str) -> float:
    """1.0 iff the completion's last number equals the answer's value."""
    got, want = number_in(completion), numeric_answer(example.answer)
    if got is None or want is None:
        return 0.0
    return float(math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12))


_COUNTDOWN = CountdownTask()


def countdown_verifier(example: Example, completion: str) -> float:
    """The countdown task's verifier: the expression after "A:" reaches the prompt's target."""
    return _COUNTDOWN.verify(example, completion)


def _countdown_problem(example: Example) -> str | None:
    try:
        parse_prompt(example.prompt)
    except ParseError:
        return NO_COUNTDOWN_TARGET
    return None


VERIFIERS: dict[str, Verifier] = {
    "exact": exact_verifier,
    "numeric": numeric_verifier,
    "countdown": countdown_verifier,
}
ROW_CHECKS: dict[str, Callable[[Example], str | None]] = {
    "numeric": lambda ex: NOT_A_NUMBER if numeric_answer(ex.answer) is None else None,
    "countdown": _countdown_problem,
}


def get_verifier(name: str, key: str = "data.verifier") -> Verifier:
    """A built-in verifier by name, or the callable a 'module:function' names; a
    `ConfigError` naming `key` and `name` otherwise."""
    if name in VERIFIERS:
        return VERIFIERS[name]
    if ":" in name:
        return import_callable(name, key)
    raise ConfigError(
        f"{key}={name!r} is not a verifier: use one of {', '.join(VERIFIERS)} or an "
        "importable 'module:function' taking (example, completion) and returning a float."
    )


def row_problem(name: str, example: Example) -> str | None:
    """Why `example` can never be scored by verifier `name` (None: it can)."""
    check = ROW_CHECKS.get(name)
    return check(example) if check else None

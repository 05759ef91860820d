"""Countdown: reach a target with some of the given numbers, + - * and exact division.

Prompt:      "Q: reach 24 with 3 5 8 2\n"
Completion:  "<think>5-2=3|3*8=24</think>A: (5-2)*8"
The target is reachable by construction: a random expression tree is built over a random
subset of the numbers (the rest are distractors), every intermediate value an integer in
1..`max_value`. The trace lists the tree's operations in the order they are combined, one
"a op b=c" step each, so a small model can learn to search step by step. Difficulty is the
number of numbers the reference uses, mixed within every split. The verifier parses the
expression after the last "A:" with a tiny recursive-descent parser (never `eval`), checks
that it uses only prompt numbers, each at most as often as listed, and that every division
is exact, and scores 1.0 iff the value equals the target. Any other solution counts too.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

from rayworks.data.tasks.base import Example, Split, draw_examples, register_task

PROMPT_RE = re.compile(r"reach ([0-9]+) with ((?:[0-9]+ ?)+)")
TOKEN_RE = re.compile(r"[ \t]*([0-9]+|[-+*/()])")
MAX_EXPR_CHARS = 120  # longer answers are malformed; bounds the parser's recursion depth
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
ATOM = 3


class ParseError(ValueError):
    """The answer is not a well-formed expression of ints, + - * /, parentheses."""


@dataclass(frozen=True)
class Term:
    """A sub-expression while building the reference: its value, text and top precedence."""

    value: int
    text: str
    precedence: int


def _combine(left: Term, op: str, right: Term) -> Term:
    """`left op right` with the fewest parentheses that keep the tree's evaluation order."""
    prec = PRECEDENCE[op]
    lhs = f"({left.text})" if left.precedence < prec else left.text
    non_associative = op in "-/" and right.precedence == prec
    rhs = f"({right.text})" if right.precedence < prec or non_associative else right.text
    value = {
        "+": left.value + right.value,
        "-": left.value - right.value,
        "*": left.value * right.value,
        "/": left.value // right.value,
    }[op]
    return Term(value, lhs + op + rhs, prec)


def _pick_op(
    a: Term, b: Term, ops: str, max_value: int, rng: random.Random
) -> tuple[Term, str, Term] | None:
    """A random op joining a and b (ordered) that keeps the result in 1..max_value, or None.

    Trivial steps (x*1, x/1) and zero results are excluded so difficulty stays honest.
    """
    for op in rng.sample(ops, len(ops)):
        left, right = (a, b) if a.value >= b.value else (b, a)
        if op == "+" and left.value + right.value <= max_value:
            return left, op, right
        if op == "-" and left.value > right.value:
            return left, op, right
        if op == "*" and right.value > 1 and left.value * right.value <= max_value:
            return left, op, right
        if op == "/" and right.value > 1 and left.value % right.value == 0:
            return left, op, right
    return None


# ------------------------------------------------------------------ verifier


def _tokens(text: str) -> list[str]:
    text = text.strip()
    tokens, pos = [], 0
    while pos < len(text):
        match = TOKEN_RE.match(text, pos)
        if not match:
            raise ParseError(f"unexpected character {text[pos]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)* ; term := atom (('*'|'/') atom)* ; atom := int | (expr)."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.pos, self.numbers = tokens, 0, []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ParseError("unexpected end of expression")
        self.pos += 1
        return token

    def expr(self) -> int:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> int:
        value = self.atom()
        while self.peek() in ("*", "/"):
            op, right = self.take(), self.atom()
            if op == "*":
                value *= right
            elif right == 0 or value % right:
                raise ParseError("division is not exact")
            else:
                value //= right
        return value

    def atom(self) -> int:
        token = self.take()
        if token == "(":
            value = self.expr()
            if self.take() != ")":
                raise ParseError("unbalanced parentheses")
            return value
        if not token.isdecimal():
            raise ParseError(f"expected a number, got {token!r}")
        self.numbers.append(int(token))
        return int(token)


def evaluate(text: str) -> tuple[int, list[int]]:
    """Value of an integer expression and the numbers it uses; ParseError if malformed."""
    if len(text) > MAX_EXPR_CHARS:
        raise ParseError(f"expression longer than {MAX_EXPR_CHARS} characters")
    parser = _Parser(_tokens(text))
    value = parser.expr()
    if parser.peek() is not None:
        raise ParseError(f"trailing {parser.peek()!r}")
    return value, parser.numbers


def parse_prompt(prompt: str) -> tuple[int, list[int]]:
    """(target, numbers) of a countdown prompt."""
    match = PROMPT_RE.search(prompt)
    if not match:
        raise ParseError(f"not a countdown prompt: {prompt!r}")
    return int(match[1]), [int(n) for n in match[2].split()]


@register_task("countdown")
class CountdownTask:
    name = "countdown"

    def __init__(
        self,
        min_numbers: int = 2,
        max_numbers: int = 4,
        max_distractors: int = 1,
        max_number: int = 12,
        max_value: int = 200,
        ops: str = "+-*/",
    ) -> None:
        if not 2 <= min_numbers <= max_numbers:
            raise ValueError(
                f"need 2 <= min_numbers <= max_numbers, got {min_numbers}, {max_numbers}"
            )
        self.min_numbers, self.max_numbers = min_numbers, max_numbers
        self.max_distractors, self.max_number = max_distractors, max_number
        self.max_value, self.ops = max_value, ops

    def _solve(self, used: list[int], rng: random.Random) -> tuple[Term, list[str]] | None:
        """A random expression tree over all of `used`, with its trace; None if stuck."""
        terms, steps = [Term(n, str(n), ATOM) for n in used], []
        while len(terms) > 1:
            a, b = (terms.pop(rng.randrange(len(terms))) for _ in range(2))
            picked = _pick_op(a, b, self.ops, self.max_value, rng)
            if picked is None:
                return None
            left, op, right = picked
            term = _combine(left, op, right)
            steps.append(f"{left.value}{op}{right.value}={term.value}")
            terms.append(term)
        return terms[0], steps

    def make(self, rng: random.Random) -> Example:
        while True:
            difficulty = rng.randint(self.min_numbers, self.max_numbers)
            used = [rng.randint(1, self.max_number) for _ in range(difficulty)]
            solved = self._solve(used, rng)
            if solved is None or solved[0].value in used:  # a listed target is no puzzle
                continue
            (result, steps), extra = solved, rng.randint(0, self.max_distractors)
            numbers = used + [rng.randint(1, self.max_number) for _ in range(extra)]
            if result.value in numbers:
                continue
            rng.shuffle(numbers)
            return Example(
                prompt=f"Q: reach {result.value} with {' '.join(map(str, numbers))}\n",
                completion=f"<think>{'|'.join(steps)}</think>A: {result.text}",
                answer=result.text,
                difficulty=difficulty,
            )

    def examples(self, n: int, split: Split, seed: int) -> list[Example]:
        return draw_examples(self.make, n, split, seed)

    def verify(self, example: Example, completion: str) -> float:
        """1.0 iff the expression after the last "A:" reaches the target using prompt numbers."""
        _, marker, tail = completion.rpartition("A:")
        if not marker:
            return 0.0
        answer = re.split(r"[\n<]", tail, maxsplit=1)[0]  # stop at a newline or "</s>"
        try:
            target, numbers = parse_prompt(example.prompt)
            value, used = evaluate(answer)
        except (ParseError, RecursionError):
            return 0.0
        if Counter(used) - Counter(numbers):  # a number not listed, or used too often
            return 0.0
        return float(value == target)

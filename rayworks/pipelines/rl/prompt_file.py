"""A user's prompt file: JSON lines, each `{"prompt": str, "answer": str | number}` with an
optional integer `"difficulty"` (default 0; evaluation reports accuracy per difficulty).
Other keys are ignored.

`read_prompt_file` keeps every usable line as an `Example` and turns every other line into
a reject row `{"file", "line", "reason", "raw"}` (line numbers from 1; `raw` is the line
as text, invalid UTF-8 escaped as `\\xff`, cut to `RAW_LIMIT` characters), so a file's
lines = kept + rejected. A line is rejected when it is blank, not UTF-8, not JSON, not an
object, has no non-empty string `prompt`, no non-empty `answer` (a string, or a finite
number, kept as its text), a `difficulty` that is not an integer, or fails the verifier's
own check (verifiers.row_problem). Lines are only ever parsed as JSON: nothing from a
user's file is unpickled or executed.

`split_prompt_files` builds the train / val / test splits (the split rule):
- a split with a file of its own (`data.val`, `data.test`) takes that file's prompts;
- every other split takes the `data.prompts` lines whose prompt hashes to it with the
  tasks' stable `split_of` (80 / 10 / 10, tasks/base.py); a line hashing to a split
  that has its own file trains instead;
- a training line whose prompt is also a val or test prompt is filtered out of train
  (counted, and written to the rejects with that reason): held-out prompts stay held out.
Counts: lines = kept + rejected + filtered, over all the files.

`file_problem` is the cheap check the config runs before Ray starts: the file exists and
has at least one usable line (it stops reading at the first one).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rayworks.data.tasks.base import Example, split_of
from rayworks.pipelines.rl.verifiers import row_problem

RAW_LIMIT = 2000  # characters of a rejected line kept in the rejects file
BLANK = "blank line"
NOT_UTF8 = "not valid UTF-8"
NOT_JSON = "not JSON"
NOT_OBJECT = "not a JSON object"
BAD_PROMPT = "no 'prompt' string, or an empty one"
BAD_ANSWER = "no 'answer' (a non-empty string or a finite number)"
BAD_DIFFICULTY = "'difficulty' is not an integer"
HELD_OUT = "prompt is also a val/test prompt (filtered from train)"


@dataclass(frozen=True)
class Line:
    number: int  # from 1
    raw: bytes
    example: Example


@dataclass
class PromptFile:
    path: str
    lines: int
    kept: list[Line] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PromptSplits:
    train: list[Example]
    val: list[Example]
    test: list[Example]
    rejects: list[dict[str, Any]]  # rejected and filtered lines of every file, with reasons
    counts: dict[str, int]  # prompts_lines = prompts_kept + prompts_rejected + prompts_filtered


def reject_row(path: str, number: int, reason: str, raw: bytes) -> dict[str, Any]:
    text = raw[: RAW_LIMIT * 4].decode("utf-8", "backslashreplace")[:RAW_LIMIT]
    return {"file": path, "line": number, "reason": reason, "raw": text}


def _answer(value: Any) -> str | None:
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    return None


def parse_line(raw: bytes, verifier: str) -> Example | str:
    """The line's `Example`, or the reason it is rejected."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8
    if not text.strip():
        return BLANK
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as err:
        return f"{NOT_JSON}: {err}"
    if not isinstance(obj, dict):
        return f"{NOT_OBJECT} (a {type(obj).__name__})"
    prompt, answer = obj.get("prompt"), _answer(obj.get("answer"))
    difficulty = obj.get("difficulty", 0)
    if not isinstance(prompt, str) or not prompt.strip():
        return BAD_PROMPT
    if answer is None:
        return BAD_ANSWER
    if not isinstance(difficulty, int) or isinstance(difficulty, bool):
        return BAD_DIFFICULTY
    example = Example(prompt=prompt, completion="", answer=answer, difficulty=difficulty)
    return row_problem(verifier, example) or example


def _lines(path: Path) -> Iterator[bytes]:
    """The file's lines as bytes, without their line ends, read as a stream."""
    with path.open("rb") as fh:
        for index, raw in enumerate(fh):
            raw = raw.removesuffix(b"\n").removesuffix(b"\r")
            yield raw.removeprefix(b"\xef\xbb\xbf") if index == 0 else raw  # byte-order mark


def read_prompt_file(path: str | Path, verifier: str) -> PromptFile:
    """Every line of `path`, kept or rejected with its reason."""
    out = PromptFile(str(path), 0)
    for number, raw in enumerate(_lines(Path(path)), start=1):
        out.lines = number
        parsed = parse_line(raw, verifier)
        if isinstance(parsed, str):
            out.rejects.append(reject_row(out.path, number, parsed, raw))
        else:
            out.kept.append(Line(number, raw, parsed))
    return out


def file_problem(path: str | Path, verifier: str | None) -> str | None:
    """Why `path` cannot serve as a prompt file (None: it has a usable line)."""
    path = Path(path)
    if not path.exists():
        return "no such file"
    if not path.is_file():
        return "not a file"
    first: tuple[int, str] | None = None
    lines = 0
    for lines, raw in enumerate(_lines(path), start=1):
        parsed = parse_line(raw, verifier or "")
        if not isinstance(parsed, str):
            return None  # one usable line is enough here; the run reads the rest
        first = first or (lines, parsed)
    if first is None:
        return "the file is empty: no usable line"
    return f"no usable line: all {lines} lines are rejected (line {first[0]}: {first[1]})"


def split_prompt_files(
    prompts: str, verifier: str, val: str | None = None, test: str | None = None
) -> PromptSplits:
    """Train / val / test of the files by the module docstring's split rule."""
    main = read_prompt_file(prompts, verifier)
    own = {name: read_prompt_file(p, verifier) for name, p in (("val", val), ("test", test)) if p}
    hashed: dict[str, list[Line]] = {"train": [], "val": [], "test": []}
    for line in main.kept:
        name = split_of(line.example.prompt)
        hashed["train" if name in own else name].append(line)
    held = {
        name: [ln.example for ln in (own[name].kept if name in own else hashed[name])]
        for name in ("val", "test")
    }
    held_out = {e.prompt for examples in held.values() for e in examples}
    rejects = [r for f in (main, *own.values()) for r in f.rejects]
    train = []
    for line in hashed["train"]:
        if line.example.prompt in held_out:
            rejects.append(reject_row(main.path, line.number, HELD_OUT, line.raw))
        else:
            train.append(line.example)
    files = (main, *own.values())
    kept = len(train) + len(held["val"]) + len(held["test"])
    rejected = sum(len(f.rejects) for f in files)
    counts = {
        "prompts_lines": sum(f.lines for f in files),
        "prompts_kept": kept,
        "prompts_rejected": rejected,
        "prompts_filtered": len(rejects) - rejected,
        "prompts_train": len(train),
        "prompts_val": len(held["val"]),
        "prompts_test": len(held["test"]),
    }
    return PromptSplits(train, held["val"], held["test"], rejects, counts)

"""Reward functions by name: exact verifiers, format shaping, Python callables, HTTP scorers.

A reward is a callable `(example, completion) -> score`. `REWARDS` maps a name to a factory
that builds one from config kwargs; a method plugs a new reward in with `@register_reward`.
`CombinedReward` turns a list of `RewardSpec`s into one weighted sum and also returns each
component's raw scores, so a run logs e.g. `reward/verifier` and `reward/format` apart.
A component with a `score_batch(examples, completions)` method (the HTTP scorer) is called
once per batch instead of once per item. A remote scorer that fails raises `RewardError`:
a silent 0.0 would look like a policy that stopped learning.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from http.client import HTTPException
from typing import Any

from pydantic import Field, SecretStr, field_validator

from rayworks.core.config import Config
from rayworks.core.errors import ConfigError, RayworksError, UnknownNameError
from rayworks.data.tasks import Example, get_task
from rayworks.pipelines.rl.verifiers import get_verifier
from rayworks.platform.access import read_secret
from rayworks.platform.plugins import import_callable

RewardFn = Callable[[Example, str], float]  # (example, completion) -> score
REWARDS: dict[str, Callable[..., RewardFn]] = {}
FORMAT_RE = re.compile(r"<think>.+?</think>\s*A:", re.DOTALL)
# kwargs that hold a secret themselves (api_key, auth_token, ...), not a reference to one
SECRET_KEY = re.compile(r"(^|_)(api_?key|token|secret|password|passwd)$", re.IGNORECASE)


RETRY_CODES = {408, 429, 500, 502, 503, 504}  # answers a retry can fix


class RewardError(RayworksError):
    """A reward could not be computed (e.g. a remote scorer failed); names where and why."""


class TransientRewardError(RewardError):
    """A failure a retry can fix (`HttpReward` retries it before giving up)."""


def register_reward(name: str) -> Callable[[Callable[..., RewardFn]], Callable[..., RewardFn]]:
    """Register a factory `(**kwargs) -> RewardFn` under `name`."""

    def decorate(factory: Callable[..., RewardFn]) -> Callable[..., RewardFn]:
        REWARDS[name] = factory
        return factory

    return decorate


# ------------------------------------------------------------------ local rewards


def has_format(example: Example, completion: str) -> float:
    """1.0 if the completion has a non-empty "<think>...</think>" followed by "A:"."""
    return float(FORMAT_RE.search(completion) is not None)


@register_reward("verifier")
def verifier_reward(task: str | None = None, verifier: str | None = None) -> RewardFn:
    """A task's exact verifier (`task`), or a prompt file's (`verifier`: exact, numeric,
    countdown or module:function; rl/verifiers.py): 1.0 iff the final answer is right."""
    if (task is None) == (verifier is None):
        raise ConfigError(
            f"the verifier reward takes exactly one of task= or verifier=, got task={task!r}, "
            f"verifier={verifier!r}."
        )
    return get_task(task).verify if task is not None else get_verifier(verifier, "verifier")


@register_reward("task_metric")
def task_metric_reward(task: str, metric: str) -> RewardFn:
    """Any `(example, completion) -> float` method of a task, e.g. the shapes task's
    `digit_score` (partial-credit outcome), `step_score` or `hack_score` (monitors)."""
    fn = getattr(get_task(task), metric, None)
    if not callable(fn) or metric.startswith("_"):
        raise ConfigError(f"task {task!r} has no score method {metric!r}.")
    return fn


@register_reward("format")
def format_reward() -> RewardFn:
    """Shaping reward for the trace-then-answer format, regardless of correctness."""
    return has_format


@register_reward("python")
def python_reward(target: str) -> RewardFn:
    """Any importable callable `(example, completion) -> float`, named "module:attribute"."""
    return import_callable(target, "python reward target")


# ------------------------------------------------------------------ remote scorer


class HttpReward:
    """Scores by POSTing JSON to a scoring server.

    One item:   {"prompt", "completion", "answer"}      -> {"score": float}
    A batch:    {"items": [{...}, ...]}                  -> {"scores": [float, ...]}

    A transient failure (no connection, a timeout, HTTP 408, 429 or 5xx) is retried up to
    `retries` times after exponential backoff with full jitter (`backoff_s` * 2^k, at most
    `max_backoff_s`); then the step fails with `RewardError`. Other answers (a 4xx, a body
    that is not a score) fail at once: retrying cannot fix them. `self.retries` counts the
    retries made, for the run's logs.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 10.0,
        api_key: SecretStr | str | None = None,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
    ) -> None:
        self.url, self.timeout_s = url, timeout_s
        self.api_key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self.max_retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self.retries = 0
        self._jitter = random.Random()

    def __call__(self, example: Example, completion: str) -> float:
        body = self._post(self._item(example, completion))
        return self._score(body, "score")

    def score_batch(self, examples: Sequence[Example], completions: Sequence[str]) -> list[float]:
        items = [self._item(e, c) for e, c in zip(examples, completions, strict=True)]
        scores = self._post({"items": items}).get("scores")
        if not isinstance(scores, list) or len(scores) != len(items):
            raise RewardError(
                f"reward server {self.url} returned {scores!r} as 'scores'; "
                f"expected a list of {len(items)} numbers."
            )
        return [self._score({"score": s}, "scores[]") for s in scores]

    @staticmethod
    def _item(example: Example, completion: str) -> dict[str, str]:
        return {"prompt": example.prompt, "completion": completion, "answer": example.answer}

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        for attempt in range(self.max_retries + 1):
            try:
                return self._post_once(payload)
            except TransientRewardError as err:
                if attempt == self.max_retries:
                    raise RewardError(f"{err} (gave up after {self.max_retries} retries)") from err
                self.retries += 1
                cap = min(self.max_backoff_s, self.backoff_s * 2**attempt)
                time.sleep(self._jitter.uniform(0, cap))  # full jitter: spread the retries
        raise AssertionError("unreachable")  # the loop returns or raises

    def _post_once(self, payload: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read()[:200].decode(errors="replace")
            kind = TransientRewardError if err.code in RETRY_CODES else RewardError
            raise kind(f"reward server {self.url} answered HTTP {err.code}: {detail!r}") from err
        except (urllib.error.URLError, HTTPException, OSError) as err:
            reason = getattr(err, "reason", err)  # URLError wraps a connect timeout
            if isinstance(reason, TimeoutError):
                reason = f"timed out after {self.timeout_s}s"
            raise TransientRewardError(f"reward server {self.url} failed: {reason}") from err
        try:
            body = json.loads(raw)
        except ValueError as err:
            raise RewardError(
                f"reward server {self.url} returned a body that is not JSON: {raw[:200]!r}"
            ) from err
        if not isinstance(body, dict):
            raise RewardError(f"reward server {self.url} returned {body!r}; expected an object.")
        return body

    def _score(self, body: dict[str, Any], key: str) -> float:
        score = body.get("score")
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not math.isfinite(score)
        ):
            raise RewardError(
                f"reward server {self.url} returned {score!r} as {key!r}; expected a finite number."
            )
        return float(score)


@register_reward("http")
def http_reward(
    url: str,
    timeout_s: float = 10.0,
    api_key_env: str | None = None,
    api_key_file: str | None = None,
    retries: int = 3,
    backoff_s: float = 0.5,
) -> RewardFn:
    """A remote scorer; failures raise `RewardError` naming the URL, never score 0.

    Its bearer key is named, never given: `api_key_env` (an environment variable of the
    process that scores) or `api_key_file` (a file it reads), so the run's config.yaml,
    report and Jobs entrypoint hold no secret (`RewardSpec` refuses a literal key).
    """
    key = read_secret(api_key_env, api_key_file, f"reward 'http' ({url})")
    return HttpReward(url, timeout_s, key, retries, backoff_s)


# ------------------------------------------------------------------ combining


class RewardSpec(Config):
    """One reward component of a run's config."""

    name: str = Field(description="registered reward name: verifier, format, python, http, ...")
    weight: float = Field(1.0, description="multiplier of this component in the total reward")
    kwargs: dict[str, Any] = Field({}, description="arguments of the reward's factory")
    label: str | None = Field(None, description="component key in logs (default: the name)")

    @field_validator("kwargs")
    @classmethod
    def _no_secrets(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A config is written to config.yaml, the report and Jobs entrypoints: a secret in
        it would leak there, so a key that holds one is refused (name its variable or file)."""
        for key in kwargs:
            if SECRET_KEY.search(key):
                raise ValueError(
                    f"reward kwarg {key!r} looks like a secret, and configs are written to "
                    f"config.yaml and reports: name where it is instead ({key}_env: an "
                    f"environment variable, or {key}_file: a file)"
                )
        return kwargs


class CombinedReward:
    """A weighted sum of reward components, with each component's raw scores for logging.

    Components are keyed by label (default: name); a repeated key gets a suffix ("http",
    "http_1", ...). A weight-0 component is a monitor: logged, not rewarded.
    """

    def __init__(self, specs: Sequence[RewardSpec]) -> None:
        self.components: dict[str, tuple[float, RewardFn]] = {}
        for spec in specs:
            if spec.name not in REWARDS:
                raise UnknownNameError("reward", spec.name, list(REWARDS))
            try:
                fn = REWARDS[spec.name](**spec.kwargs)
            except TypeError as err:
                raise ConfigError(
                    f"reward {spec.name!r} got bad kwargs {spec.kwargs!r}: {err}"
                ) from err
            base = spec.label or spec.name
            key, n = base, 1
            while key in self.components:
                key, n = f"{base}_{n}", n + 1
            self.components[key] = (spec.weight, fn)

    def retries(self) -> int:
        """Retries made so far by the components that retry (`HttpReward`)."""
        return sum(getattr(fn, "retries", 0) for _, fn in self.components.values())

    def __call__(
        self, examples: Sequence[Example], completions: Sequence[str]
    ) -> tuple[list[float], dict[str, list[float]]]:
        """(weighted total per item, {component: raw score per item})."""
        if len(examples) != len(completions):
            raise ValueError(f"{len(examples)} examples but {len(completions)} completions")
        totals = [0.0] * len(examples)
        per_component: dict[str, list[float]] = {}
        for key, (weight, fn) in self.components.items():
            batch = getattr(fn, "score_batch", None)
            if batch is not None:
                scores = [float(s) for s in batch(examples, completions)]
            else:
                scores = [float(fn(e, c)) for e, c in zip(examples, completions, strict=True)]
            per_component[key] = scores
            totals = [t + weight * s for t, s in zip(totals, scores, strict=True)]
        return totals, per_component

"""Reward registry: verifiers, format shaping, weighted combination, and a real HTTP scorer."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import ValidationError

from rayworks.core.errors import ConfigError, UnknownNameError
from rayworks.data.tasks import Example, get_task
from rayworks.pipelines.rl.rewards import (
    REWARDS,
    CombinedReward,
    HttpReward,
    RewardError,
    RewardSpec,
    has_format,
    register_reward,
)

SLOW_S = 0.6  # the /slow route's delay, longer than the client's 0.2 s timeout


def _score(item: dict) -> float:
    """The test server's scorer: 1.0 iff the completion ends with the answer."""
    return float(item["completion"].endswith(item["answer"]))


class ScorerHandler(BaseHTTPRequestHandler):
    """Routes: /score, /batch, /error (500), /malformed, /noscore, /slow, else 404.

    Records each request's Authorization header.
    """

    seen_auth: list[str | None] = []
    flaky_calls = 0

    def do_POST(self) -> None:
        ScorerHandler.seen_auth.append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, reply = 200, b""
        if self.path == "/flaky":  # every third call fails as an overloaded server would
            ScorerHandler.flaky_calls += 1
            if ScorerHandler.flaky_calls % 3 == 0:
                status, reply = 503, b"busy"
            else:
                reply = json.dumps({"scores": [_score(i) for i in body["items"]]}).encode()
        elif self.path == "/score":
            reply = json.dumps({"score": _score(body)}).encode()
        elif self.path == "/batch":
            reply = json.dumps({"scores": [_score(i) for i in body["items"]]}).encode()
        elif self.path == "/error":
            status, reply = 500, b"scorer crashed"
        elif self.path == "/malformed":
            reply = b"<html>not json"
        elif self.path == "/noscore":
            reply = json.dumps({"scores": [1.0], "score": "high"}).encode()
        elif self.path == "/slow":
            time.sleep(SLOW_S)
            reply = b'{"score": 1.0}'
        else:
            status, reply = 404, b"no such route"
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
        except OSError:  # the client gave up (the timeout test)
            pass

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ScorerHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


EX = Example(prompt="Q: 2+2=\n", completion="<think>2+2=4 c0</think>A: 4", answer="4", difficulty=1)


# ------------------------------------------------------------------ local rewards


def test_verifier_reward_on_both_tasks() -> None:
    for task_name in ("arithmetic", "countdown"):
        task, reward = get_task(task_name), REWARDS["verifier"](task=task_name)
        examples = task.examples(40, "train", seed=0)
        assert all(reward(e, e.completion) == 1.0 for e in examples)
        assert all(reward(e, "A: 999999") == 0.0 for e in examples)


def test_format_reward() -> None:
    reward = REWARDS["format"]()
    assert reward(EX, "<think>2+2=4</think>A: 5") == 1.0  # shaping: right form, wrong answer
    assert reward(EX, "<think>a\nb</think> A: 4") == 1.0
    assert reward(EX, "A: 4") == 0.0
    assert reward(EX, "<think></think>A: 4") == 0.0
    assert reward(EX, "<think>x</think>4") == 0.0
    assert reward(EX, "A: 4<think>x</think>") == 0.0


def test_weights_combine_and_components_are_reported() -> None:
    combined = CombinedReward(
        [
            RewardSpec(name="verifier", kwargs={"task": "arithmetic"}),
            RewardSpec(name="format", weight=0.1),
        ]
    )
    completions = ["<think>2+2=4</think>A: 4", "A: 4", "<think>2+2=5</think>A: 5", "junk"]
    totals, parts = combined([EX] * 4, completions)
    assert parts == {"verifier": [1.0, 1.0, 0.0, 0.0], "format": [1.0, 0.0, 1.0, 0.0]}
    assert totals == pytest.approx([1.1, 1.0, 0.1, 0.0])
    assert combined([], []) == ([], {"verifier": [], "format": []})
    with pytest.raises(ValueError, match="1 examples but 2 completions"):
        combined([EX], ["a", "b"])


def test_repeated_names_get_distinct_component_keys() -> None:
    combined = CombinedReward([RewardSpec(name="format"), RewardSpec(name="format", weight=-1)])
    totals, parts = combined([EX], [EX.completion])
    assert list(parts) == ["format", "format_1"] and totals == [0.0]


def test_labels_name_components_and_task_metrics_score() -> None:
    shapes = get_task("shapes")
    ex = shapes.examples(1, "test", 0)[0]
    wrong_total = ex.completion.replace(f"A: {ex.answer}", f"A: {int(ex.answer) + 1}")
    combined = CombinedReward(
        [
            RewardSpec(
                name="task_metric",
                label="outcome",
                kwargs={"task": "shapes", "metric": "digit_score"},
            ),
            RewardSpec(
                name="task_metric",
                label="steps",
                weight=0.0,
                kwargs={"task": "shapes", "metric": "step_score"},
            ),
        ]
    )
    totals, parts = combined([ex, ex], [ex.completion, wrong_total])
    assert list(parts) == ["outcome", "steps"]
    assert parts["steps"] == [1.0, 1.0]  # the trace is right, only the answer differs
    assert parts["outcome"][0] == 1.0 and parts["outcome"][1] < 1.0
    assert totals == parts["outcome"]  # the weight-0 component is a monitor
    with pytest.raises(ConfigError, match="no score method 'nope'"):
        REWARDS["task_metric"](task="shapes", metric="nope")


def test_python_callable_and_registered_rewards_plug_in() -> None:
    spec = RewardSpec(name="python", kwargs={"target": "rayworks.pipelines.rl.rewards:has_format"})
    assert CombinedReward([spec])([EX], [EX.completion])[1] == {"python": [1.0]}
    assert REWARDS["python"](target="rayworks.pipelines.rl.rewards:has_format") is has_format
    with pytest.raises(ConfigError, match="cannot be imported"):
        REWARDS["python"](target="rayworks.nope:fn")
    with pytest.raises(ConfigError, match="not callable"):
        REWARDS["python"](target="rayworks.pipelines.rl.rewards:REWARDS")

    @register_reward("length_test")
    def length_reward(scale: float = 1.0):
        return lambda example, completion: scale * len(completion)

    try:
        spec = RewardSpec(name="length_test", weight=2.0, kwargs={"scale": 0.5})
        assert CombinedReward([spec])([EX], ["abcd"])[0] == [4.0]
    finally:
        del REWARDS["length_test"]


def test_unknown_name_and_bad_kwargs_are_config_errors() -> None:
    with pytest.raises(UnknownNameError) as err:
        CombinedReward([RewardSpec(name="nope")])
    assert "unknown reward 'nope'" in str(err.value)
    assert "format, http, python, task_metric" in str(err.value)
    with pytest.raises(ConfigError, match="reward 'format' got bad kwargs"):
        CombinedReward([RewardSpec(name="format", kwargs={"task": "arithmetic"})])
    with pytest.raises(ValidationError, match="wieght"):  # a typo in the config is an error
        RewardSpec(name="format", wieght=2.0)


# ------------------------------------------------------------------ HTTP scorer


def test_http_single_item_sends_bearer_key(
    server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ScorerHandler.seen_auth.clear()
    monkeypatch.setenv("SCORER_KEY", "s3cret")
    reward = REWARDS["http"](url=f"{server}/score", api_key_env="SCORER_KEY")
    assert isinstance(reward, HttpReward)
    assert "s3cret" not in repr(vars(reward))  # the key is a SecretStr: masked in reprs
    assert reward(EX, "A: 4") == 1.0
    assert reward(EX, "A: 5") == 0.0
    assert ScorerHandler.seen_auth == ["Bearer s3cret", "Bearer s3cret"]
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    REWARDS["http"](url=f"{server}/score", api_key_file=str(key_file))(EX, "A: 4")
    assert ScorerHandler.seen_auth[-1] == "Bearer from-file"
    REWARDS["http"](url=f"{server}/score")(EX, "A: 4")
    assert ScorerHandler.seen_auth[-1] is None


def test_http_key_is_named_never_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A literal secret in a reward's kwargs is refused before any run file exists; a missing
    variable or file is a ConfigError naming it."""
    for key in ("api_key", "apikey", "auth_token", "password"):
        with pytest.raises(ValidationError, match=f"reward kwarg '{key}' looks like a secret"):
            RewardSpec(name="http", kwargs={"url": "http://127.0.0.1:1/", key: "s3cret"})
    RewardSpec(name="python", kwargs={"max_tokens": 4})  # not a secret: accepted
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ConfigError, match="'NO_SUCH_KEY_VAR' is not set"):
        REWARDS["http"](url="http://127.0.0.1:1/", api_key_env="NO_SUCH_KEY_VAR")
    with pytest.raises(ConfigError, match=r"cannot read the .* file"):
        REWARDS["http"](url="http://127.0.0.1:1/", api_key_file=str(tmp_path / "absent"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        REWARDS["http"](url="http://127.0.0.1:1/", api_key_file=str(tmp_path / "empty"))


def test_http_batch_is_one_request(server: str) -> None:
    ScorerHandler.seen_auth.clear()
    combined = CombinedReward(
        [RewardSpec(name="http", weight=2.0, kwargs={"url": f"{server}/batch"})]
    )
    totals, parts = combined([EX] * 3, ["A: 4", "A: 5", "A: 44"])
    assert parts == {"http": [1.0, 0.0, 1.0]} and totals == [2.0, 0.0, 2.0]
    assert len(ScorerHandler.seen_auth) == 1


@pytest.mark.parametrize(
    ("route", "problem"),
    [
        ("/error", "HTTP 500: 'scorer crashed'"),
        ("/malformed", "not JSON"),
        ("/noscore", "'high' as 'score'"),
        ("/missing", "HTTP 404: 'no such route'"),
    ],
)
def test_http_failures_raise_naming_url_and_problem(server: str, route: str, problem: str) -> None:
    url = f"{server}{route}"
    with pytest.raises(RewardError) as err:
        HttpReward(url, timeout_s=2, retries=0)(EX, "A: 4")
    assert url in str(err.value) and problem in str(err.value)


def test_http_batch_with_wrong_shape_raises(server: str) -> None:
    with pytest.raises(RewardError, match="expected a list of 2 numbers"):
        HttpReward(f"{server}/noscore").score_batch([EX, EX], ["a", "b"])


def test_http_timeout_raises(server: str) -> None:
    start = time.monotonic()
    with pytest.raises(RewardError, match=r"/slow failed: timed out after 0.2s"):
        HttpReward(f"{server}/slow", timeout_s=0.2, retries=0)(EX, "A: 4")
    assert time.monotonic() - start < SLOW_S


def test_http_unreachable_raises() -> None:
    with pytest.raises(RewardError, match=re.escape("127.0.0.1:9/score failed")):
        HttpReward("http://127.0.0.1:9/score", timeout_s=1, retries=0)(EX, "A: 4")


def test_http_retries_a_server_that_fails_every_third_call(server: str) -> None:
    ScorerHandler.flaky_calls = 0
    combined = CombinedReward(
        [RewardSpec(name="http", kwargs={"url": f"{server}/flaky", "backoff_s": 0.001})]
    )
    scores = [combined([EX], [c])[0][0] for c in ["A: 4", "A: 5"] * 6]
    assert scores == [1.0, 0.0] * 6  # every item scored, none lost to the failures
    # 12 answers took 17 calls: the 3rd, 6th, ..., 15th failed and were each retried once
    assert ScorerHandler.flaky_calls == 17
    assert combined.retries() == 5


def test_http_gives_up_after_its_retries_and_does_not_retry_a_client_error(server: str) -> None:
    reward = HttpReward(f"{server}/error", retries=2, backoff_s=0.001)
    with pytest.raises(
        RewardError, match=r"HTTP 500: 'scorer crashed' \(gave up after 2 retries\)"
    ):
        reward(EX, "A: 4")
    assert reward.retries == 2
    missing = HttpReward(f"{server}/absent", retries=2, backoff_s=0.001)
    with pytest.raises(RewardError, match="HTTP 404"):
        missing(EX, "A: 4")
    assert missing.retries == 0  # a 404 cannot be fixed by asking again

"""One Ray head per test session, with the dashboard's job server and token auth on.

The head runs in its own process group with its own ports, temp dir and auth token, so
tests never touch `~/.ray` or a user's cluster, and it is torn down by its process group.
In-process tests connect with `ray_address` (fixture `ray_session`); CLI subprocesses get
`RAY_ADDRESS` through `cli_env`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Ray Train's controller polls its workers this often (default 2 s): a run's end, or a
# killed worker, is noticed up to that late, once per Train run of the suite.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")

VENV_BIN = Path(sys.executable).parent
# Ray reads its auth settings when first imported, and pytest imports every test module
# before any fixture runs: the session's token must be in place at conftest import time.
RAY_TMP = Path(f"/tmp/rwt-{secrets.token_hex(3)}")  # short: Ray's socket paths are length-capped
RAY_TMP.mkdir()
TOKEN_PATH = RAY_TMP / "auth_token"
TOKEN_PATH.write_text(secrets.token_hex(32))
os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(TOKEN_PATH))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the head's temp dir after a green session; keep its logs when one failed."""
    if exitstatus == 0:
        shutil.rmtree(RAY_TMP, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, headers: dict[str, str], timeout: float) -> None:
    import requests

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if requests.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


WATCHED = ("gcs_server", "raylet")  # the head processes whose death ends the session's Ray


def _group_processes(pgid: int, names: tuple[str, ...]) -> dict[str, object]:
    import psutil

    found = {}
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] in names and os.getpgid(proc.pid) == pgid:
                found[proc.info["name"]] = proc
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def _watch_head(procs: dict, logs: Path, stop: threading.Event, config: pytest.Config) -> None:
    """Say on the terminal, with the tail of its log, when a head process dies mid-session.

    A driver whose GCS is gone exits from Ray's C++ core (code 1) without a word, and
    pytest's summary is lost with it: this message is then the only trace in CI's output.
    It is written with pytest's output capture lifted, which a running test would hide."""
    import psutil

    while not stop.wait(2):
        for name, proc in list(procs.items()):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    continue
            except psutil.NoSuchProcess:
                pass
            del procs[name]
            tails = []
            for log in sorted(logs.glob(f"{name}*.out")) + sorted(logs.glob(f"{name}*.err")):
                tails.append(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-15:]))
            message = f"\n!! ray head: {name} (pid {proc.pid}) exited mid-session\n"
            with config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
                sys.stderr.write(message + "\n".join(tails) + "\n")
                sys.stderr.flush()


def _kill_group(pgid: int, grace: float = 10) -> None:
    """SIGTERM the head's process group, then SIGKILL whatever is left after `grace` s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.time() + grace
        while time.time() < deadline:
            time.sleep(0.2)
            os.killpg(pgid, 0)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """A `ray start --head` cluster: yields a dict with gcs/dashboard addresses and token.

    Not `--block`: a blocking `ray start` kills the whole cluster when any of its helper
    processes (dashboard modules, agents, autoscaler monitor) exits, and the test driver
    then dies with it. Started in a new session, every head process shares one process
    group, which teardown kills."""
    temp, token_path = RAY_TMP, TOKEN_PATH
    token = token_path.read_text()
    gcs_port, dash_port, agent_port = free_port(), free_port(), free_port()
    env = dict(os.environ)
    # every port of its own: the job agent's default (52365) is taken by any other Ray on
    # the machine (a user's `rayworks run`), and then no job can be submitted
    cmd = [
        str(VENV_BIN / "ray"),
        "start",
        "--head",
        f"--port={gcs_port}",
        "--num-cpus=2",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dash_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--temp-dir={temp}",
        "--disable-usage-stats",
        "--include-dashboard=true",
    ]
    log_path = tmp_path_factory.mktemp("ray-head") / "head.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    stop = threading.Event()
    try:
        if proc.wait(timeout=180) != 0:
            raise RuntimeError(f"ray start exited {proc.returncode}:\n{log_path.read_text()}")
        dashboard = f"http://127.0.0.1:{dash_port}"
        _wait_http(f"{dashboard}/api/version", {"Authorization": f"Bearer {token}"}, 90)
        procs = _group_processes(proc.pid, WATCHED)
        logs = temp / "session_latest" / "logs"
        threading.Thread(
            target=_watch_head, args=(procs, logs, stop, pytestconfig), daemon=True
        ).start()
        yield {
            "address": f"127.0.0.1:{gcs_port}",
            "dashboard": dashboard,
            "token": token,
            "token_path": str(token_path),
            "temp_dir": str(temp),
        }
    finally:
        stop.set()
        _kill_group(proc.pid)


@pytest.fixture(scope="session")
def ray_session(ray_head):
    """This test process connected to the session's head."""
    import ray

    if not ray.is_initialized():
        ray.init(address=ray_head["address"], log_to_driver=False)
    yield ray_head
    ray.shutdown()


def _cli_env(ray_head: dict, runs_dir: Path) -> dict[str, str]:
    return dict(
        os.environ,
        RAY_ADDRESS=ray_head["address"],
        RAYWORKS_RUNS_DIR=str(runs_dir),
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=ray_head["token_path"],
    )


def _run_cli(args: list[str], env: dict[str, str], timeout: float = 600, check: bool = True):
    proc = subprocess.run(
        [sys.executable, "-m", "rayworks", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"rayworks {' '.join(args)} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


@pytest.fixture
def cli_env(ray_head, tmp_path: Path) -> dict[str, str]:
    """Environment for `rayworks ...` subprocesses: join the session head, runs under tmp."""
    return _cli_env(ray_head, tmp_path / "runs")


@pytest.fixture
def cli(cli_env: dict[str, str]):
    """Run `python -m rayworks ARGS` against the session head; failures show the output."""

    def run(args: list[str], timeout: float = 600, check: bool = True, env=None):
        return _run_cli(args, env or cli_env, timeout, check)

    return run


@dataclass
class FinishedRun:
    """What one `rayworks run` wrote: its folder, summary.json and metrics.jsonl records."""

    dir: Path
    runs: Path  # the runs root (its `cache/` holds shared builds)
    summary: dict
    records: list[dict]


@pytest.fixture
def smoke_run(cli, cli_env):
    """`smoke_run(NAME, *extra_args)`: `rayworks run NAME --preset smoke` through the CLI;
    checks that exactly one run of NAME completed and returns what it wrote."""

    def run(name: str, *extra: str) -> FinishedRun:
        cli(["run", name, "--preset", "smoke", "--no-progress", *extra])
        runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
        [run_dir] = list(runs.glob(f"{name}/*/"))
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed", summary.get("error")
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return FinishedRun(run_dir, runs, summary, [json.loads(line) for line in lines])

    return run


@pytest.fixture(scope="session")
def cli_at(ray_head):
    """`cli_at(runs_dir)` -> `(env, run)`: the `cli_env` / `cli` pair for a runs dir of the
    caller's choosing, for module-scoped fixtures that make a run several tests share."""

    def make(runs_dir: Path):
        env = _cli_env(ray_head, runs_dir)

        def run(args: list[str], timeout: float = 600, check: bool = True):
            return _run_cli(args, env, timeout, check)

        return env, run

    return make


# A tiny HF decoder + char tokenizer folder, built on demand (RL tests).
TRACES = ["Q: 12+3=\n<think>2+3=5 c0|1+0=1 c0</think>A: 15"] * 30


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`tiny_lm(texts, d_model=32, n_layer=2, n_head=2)` -> a new model folder (seed 0)."""

    def build(
        texts: list[str] = TRACES, d_model: int = 32, n_layer: int = 2, n_head: int = 2
    ) -> Path:
        import torch

        from rayworks.models import DecoderSpec, TokenizerSpec, decoder_for, train_tokenizer

        path = tmp_path_factory.mktemp("tiny_lm")
        tok = train_tokenizer(TokenizerSpec(), texts)
        torch.manual_seed(0)
        spec = DecoderSpec(d_model=d_model, n_layer=n_layer, n_head=n_head)
        decoder_for(spec, tok).save_pretrained(path)
        tok.save_pretrained(path)
        return path

    return build


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`tiny_gpt2(texts)` -> a new GPT-2-style folder (seed 0): `GPT2LMHeadModel` (learned
    absolute positions, 128 of them) and a byte-level BPE whose only special token,
    `<|endoftext|>`, is BOS and EOS; no pad token, as in GPT-2 itself."""

    def build(texts: list[str] = TRACES) -> Path:
        import torch
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

        path = tmp_path_factory.mktemp("tiny_gpt2")
        end = "<|endoftext|>"
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=320,
            special_tokens=[end],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        bpe.train_from_iterator(texts, trainer=trainer)
        tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=end, eos_token=end)
        torch.manual_seed(0)
        config = GPT2Config(
            vocab_size=len(tok),
            n_positions=128,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=tok.eos_token_id,
            eos_token_id=tok.eos_token_id,
        )
        GPT2LMHeadModel(config).save_pretrained(path)
        tok.save_pretrained(path)
        return path

    return build


@pytest.fixture
def one_torch_thread():
    """Tiny tensors gain nothing from threads, which thrash on a loaded 2-core box; the
    previous thread count comes back afterwards. Use with `pytest.mark.usefixtures`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_llama():
    """A tiny random Llama (4 heads of d_h = 8; LeSTD unit tests), one torch thread."""
    import torch

    from rayworks.models import DecoderSpec, build_decoder

    torch.set_num_threads(1)  # tiny SVDs and matmuls gain nothing from threads
    torch.manual_seed(0)
    spec = DecoderSpec(d_model=32, n_layer=2, n_head=4, ffn_mult=2.0, max_seq_len=32)
    model = build_decoder(spec, vocab_size=40).eval()
    model.config.use_cache = False
    return model


@pytest.fixture
def tiny_vit():
    """A tiny random ViT with non-trivial biases (Vulcan unit tests), one torch thread."""
    import torch

    from rayworks.models.vit import ViT, ViTSpec

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ViT(ViTSpec(d_model=16, n_layer=2, n_head=2, ffn_dim=24))
    with torch.no_grad():  # every bias path is exercised
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture
def images():
    """Six random 16x16 single-channel images in [0, 1]."""
    import torch

    return torch.rand(6, 1, 16, 16, generator=torch.Generator().manual_seed(1))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests skip cleanly, with the reason, where CUDA is absent (CI, laptops)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (marker gpu); this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _live_train_worker_pids(head: dict, proc: subprocess.Popen, want: int = 0) -> list[int]:
    """PIDs of the live Ray Train workers of the run that `proc` drives.

    Asked of the session cluster's state API (`ray_head`) for the actors of `proc`'s job, so
    no other Ray instance on the machine (a concurrent `make demo`) and no other run count.
    With `want`, wait (while `proc` runs) until that many are up."""
    from ray.util.state import list_actors, list_jobs

    deadline = time.time() + 240
    while True:
        jobs = [
            j.job_id
            for j in list_jobs(address=head["address"])
            if j.driver_info is not None and j.driver_info.pid == str(proc.pid)
        ]
        live = [("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")]
        actors = (
            list_actors(address=head["address"], filters=[("job_id", "=", jobs[0]), *live])
            if jobs
            else []
        )
        pids = sorted(a.pid for a in actors if a.pid)
        if len(pids) >= want or time.time() > deadline:
            return pids
        assert proc.poll() is None, "run ended before its train workers were up"
        time.sleep(0.2)


@pytest.fixture
def train_worker_pids() -> Callable[..., list[int]]:
    """`(ray_head, proc, want=0) -> pids` of the Ray Train workers of the run `proc` drives."""
    return _live_train_worker_pids

"""The scoring children's fork server (`zygote.py`): one zygote per key, children forked
ready that score as spawned ones, and a spawned child wherever forking is not safe."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rayworks.pipelines.corpus import readers, zygote
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.guard import GuardedChain, LocalChain, StepsFactory
from rayworks.pipelines.corpus.score_unit import reader_config

pytestmark = pytest.mark.skipif(not zygote.supported(), reason="no pidfd on this platform")

TEXT = "The library stays open late in winter; volunteers catalogued the old maps. " * 4


@pytest.fixture
def cfg(tmp_path: Path) -> CorpusConfig:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(f'{{"text": "{TEXT} Item {i}.", "license": "MIT"}}\n' for i in range(4))
    )
    return CorpusConfig(inputs=[str(path)])


@pytest.fixture
def key(request: pytest.FixtureRequest) -> Iterator[str]:
    yield zygote.zygote_key("test_zygote", request.node.name)
    zygote.stop_zygotes()


def _scored(chain: GuardedChain | LocalChain, cfg: CorpusConfig):
    good, _ = readers.split_table(readers.unit_table(cfg.inputs, "jsonl", reader_config(cfg)))
    try:
        return chain(good).table.to_pandas()
    finally:
        chain.close()


def test_chains_of_one_key_share_one_zygote_and_score_as_in_process(cfg, key):
    build = StepsFactory("rayworks.pipelines.corpus.chain:build_steps", cfg)
    first = GuardedChain(build, 300, share_key=key)
    first._ready()
    started = zygote._LAUNCHED[key]  # by this process, for the first chain
    second = GuardedChain(build, 300, share_key=key)
    local = _scored(LocalChain(build), cfg)
    for chain in (first, second):
        assert _scored(chain, cfg).equals(local)  # NaN-aware, as pandas compares
        assert chain.forked == 1
    assert zygote._LAUNCHED[key] is started and started.poll() is None  # built once


def test_children_outlive_their_zygote_and_a_new_one_starts_when_needed(cfg, key):
    build = StepsFactory("rayworks.pipelines.corpus.chain:build_steps", cfg)
    chain = GuardedChain(build, 300, share_key=key)
    chain._ready()
    old = zygote._LAUNCHED[key]
    zygote.stop_zygotes()
    assert old.poll() is not None
    local = _scored(LocalChain(build), cfg)
    assert _scored(chain, cfg).equals(local)
    again = GuardedChain(build, 300, share_key=key)  # the socket file is stale now
    assert _scored(again, cfg).equals(local)
    assert again.forked == 1 and zygote._LAUNCHED[key] is not old


def test_a_zygote_running_threads_does_not_fork_and_children_are_spawned(cfg, key):
    build = StepsFactory("rayworks.pipelines.corpus.guard:threaded_steps", cfg)
    chain = GuardedChain(build, 300, share_key=key)
    assert _scored(chain, cfg).equals(_scored(LocalChain(build), cfg))
    assert chain.forked == 0


def test_a_socket_folder_others_can_enter_is_not_used(cfg, key, tmp_path, monkeypatch):
    monkeypatch.setattr(zygote.tempfile, "gettempdir", lambda: str(tmp_path))
    folder = tmp_path / f"rayworks-zygotes-{os.getuid()}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert zygote.socket_dir() is None
    build = StepsFactory("rayworks.pipelines.corpus.chain:build_steps", cfg)
    assert zygote.fork_child(key, build) is None
    chain = GuardedChain(build, 300, share_key=key)
    assert _scored(chain, cfg).equals(_scored(LocalChain(build), cfg))
    assert chain.forked == 0 and not zygote._LAUNCHED


def test_a_zygote_ends_with_the_process_that_started_it(cfg, key, tmp_path):
    """The starter exits (as a Ray worker that Ray stops does): the zygote sees its parent
    gone within `CHECK_S`, removes its socket and ends."""
    program = (
        "import sys; from rayworks.pipelines.corpus import zygote\n"
        "from rayworks.pipelines.corpus.config import CorpusConfig\n"
        "from rayworks.pipelines.corpus.guard import StepsFactory\n"
        f"cfg = CorpusConfig(inputs=[{cfg.inputs[0]!r}])\n"
        "build = StepsFactory('rayworks.pipelines.corpus.chain:build_steps', cfg)\n"
        f"child = zygote.fork_child({key!r}, build)\n"
        f"print(child is not None, zygote._LAUNCHED[{key!r}].pid)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=300
    )
    forked, pid = out.stdout.split()
    assert forked == "True"
    sock = zygote.socket_dir() / f"{key}.sock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (_alive(int(pid)) or sock.exists()):
        time.sleep(0.05)
    assert not _alive(int(pid)) and not sock.exists()
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(FileNotFoundError):
        s.connect(str(sock))


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False

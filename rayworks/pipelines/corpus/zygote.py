"""A fork server per node and settings: the scoring children of `guard.py` forked ready.

Every scoring worker runs its steps in a child process (`guard.GuardedChain`: the time
budget kills a stuck child). Started fresh, a child pays the interpreter, the steps'
imports (pandas, scipy, the language model's tables) and their build: ~0.5 s of CPU on
our 2-core machines, once per worker and again after every kill, and each child holds
its own copy of what it imported. The first worker of a node that needs a child starts
a zygote instead: a fresh interpreter that builds the steps once, then forks a child
per request. A forked child is ready at once, and shares the zygote's pages until it
writes them (`gc.freeze` keeps the collector from touching them).

How a worker gets a child (`fork_child`): it connects to the zygote's Unix socket
(`socket_dir()/<key>.sock`, a folder only its user can enter; the zygote also checks
the peer's uid) and sends one end of a fresh socket pair; the zygote forks, the child
talks to the worker over that pair exactly as a spawned child does
(`guard.serve`), and the worker gets the child's pidfd back, so it kills that process
and no other whose pid came later. No zygote listening: the worker takes the key's lock
file, starts one (it builds while others wait on the lock) and asks again.

Lifetime: a zygote ends when the process that started it ends (it checks its parent
every second), when that process asks (`stop_zygotes`, on a change of settings), or
when its socket file is replaced. Its children do not depend on it after the fork.

Where this is not possible the caller spawns its child as before (`fork_child` returns
None): no pidfd (Linux < 5.3, macOS), a socket folder someone else owns, a zygote that
failed to start (its error then shows when the spawned child fails the same way) or
runs threads (forking a process with threads can deadlock the child: the zygote
refuses).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 600.0
"""How long a child or a zygote may take to build its steps (the language model, word
tables), and a worker wait for either."""
CHECK_S = 1.0
"""How often a zygote looks whether its parent is alive and its socket still its own."""

NO_THREADS_ENV = {"OMP_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
"""A zygote's environment: it forks only while it runs no thread but its own, and NumPy's
BLAS starts a pool at import (one thread per core unless told one; a scoring child holds
one CPU anyway), Arrow's jemalloc (`platform.cluster.SMALL_PAGES_ENV`) a background
purging thread (off, it purges on its allocation paths instead)."""

_LAUNCHED: dict[str, subprocess.Popen] = {}
"""The zygotes this process started, by key (`stop_zygotes`)."""


def supported() -> bool:
    """Whether this platform can hand a forked child's pidfd to the worker (Linux >= 5.3)."""
    return hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


def socket_dir() -> Path | None:
    """This user's folder for zygote sockets (created 0700), or None when it exists but
    is not ours alone."""
    path = Path(tempfile.gettempdir()) / f"rayworks-zygotes-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def zygote_key(*parts: Any) -> str:
    """A key for a zygote: the host (a temp folder shared by nodes keeps one socket per
    node), the interpreter, its import path and `parts` (the settings)."""
    text = repr((socket.gethostname(), sys.executable, sys.path, parts))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class Forked:
    """A child forked by a zygote, held by its pidfd: `poll`, `kill` and `wait` as
    `subprocess.Popen` has them (the worker is not its parent: no exit status)."""

    def __init__(self, pidfd: int) -> None:
        self.pidfd = pidfd

    def _ended(self, timeout: float | None) -> bool:
        """Whether the child ended, waiting up to `timeout` s (None: until it does); a
        pidfd turns readable when its process ends."""
        if self.pidfd < 0:
            return True
        waiter = select.poll()  # not select(): a worker's fd numbers may pass FD_SETSIZE
        waiter.register(self.pidfd, select.POLLIN)
        return bool(waiter.poll(None if timeout is None else max(0, int(timeout * 1000))))

    def poll(self) -> int | None:
        return 0 if self._ended(0.0) else None

    def kill(self) -> None:
        if self.pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired("forked child", timeout or 0.0)
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return 0


def _ask(path: Path) -> tuple[Forked, Connection] | None:
    """A child from the zygote listening at `path`; None when none listens or it refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(START_TIMEOUT_S)
        try:
            client.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        ours, theirs = socket.socketpair()
        with theirs:
            socket.send_fds(client, [b"f"], [theirs.fileno()])
        try:
            _, fds, _, _ = socket.recv_fds(client, 1, 1)
        except OSError:
            fds = []
        if not fds:
            ours.close()
            return None
        return Forked(fds[0]), Connection(ours.detach())


_BOOT = """
import sys
from multiprocessing.connection import Connection
conn = Connection(int(sys.argv[1]))
sys.path[:] = conn.recv()
from rayworks.pipelines.corpus.zygote import zygote_main
zygote_main(conn, sys.argv[2], int(sys.argv[3]))
"""
"""The zygote's program: the parent's import path, then `zygote_main`."""


def _launch(path: Path, build: Any) -> bool:
    """Start a zygote that listens at `path` once `build()` is built; whether it does."""
    ours, theirs = socket.socketpair()
    with theirs:
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(theirs.fileno()), str(path), str(os.getpid())],
            pass_fds=(theirs.fileno(),),
            env={**os.environ, **NO_THREADS_ENV},
        )
    with Connection(ours.detach()) as conn:
        conn.send(list(sys.path))
        conn.send(build)
        ready = conn.poll(START_TIMEOUT_S) and receive(conn) == "listening"
    if not ready:
        proc.kill()
        proc.wait()
        return False
    _LAUNCHED[path.stem] = proc
    return True


def receive(conn: Connection) -> Any:
    """The next message on `conn`; None once the other end is gone (a child that died, or
    a worker that Ray stopped, which closes the pipe: its child then ends quietly)."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


@contextlib.contextmanager
def _locked(path: Path, deadline: float):
    """An exclusive lock on `path`, waited for until `deadline` (then TimeoutError)."""
    with open(path, "a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"lock {path} held past the deadline") from None
                time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fork_child(key: str, build: Any) -> tuple[Forked, Connection] | None:
    """A child forked from this node's zygote for `key` (started here if none listens),
    with its end of the socket pair; None where that is not possible (the module
    docstring): the caller then spawns its child."""
    if not supported() or (folder := socket_dir()) is None:
        return None
    path = folder / f"{key}.sock"
    try:
        if (child := _ask(path)) is not None:
            return child
        with _locked(folder / f"{key}.lock", time.monotonic() + START_TIMEOUT_S):
            if (child := _ask(path)) is None and _launch(path, build):
                child = _ask(path)
        return child
    except (OSError, TimeoutError):
        return None


def stop_zygotes(keep: str | None = None) -> None:
    """Stop the zygotes this process started, but the one of `keep`."""
    for key in [k for k in _LAUNCHED if k != keep]:
        proc = _LAUNCHED.pop(key)
        proc.kill()
        proc.wait()


def _single_threaded() -> bool:
    return len(os.listdir("/proc/self/task")) == 1


def zygote_main(conn: Connection, path: str, parent: int) -> None:
    """The zygote: build the steps, listen at `path`, fork a ready child per request,
    until process `parent` (the starter) is no longer its parent."""
    from rayworks.pipelines.corpus.guard import build_chain, serve

    if (chain := build_chain(conn)) is None:
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{path}.{os.getpid()}"
    listener.bind(staging)
    os.replace(staging, path)  # a stale socket file of a dead zygote is replaced at once
    mine = os.stat(path).st_ino
    listener.listen(64)
    listener.settimeout(CHECK_S)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    gc.freeze()  # the built steps stay shared with the children: no collection writes them
    conn.send("listening")
    conn.close()
    uid = os.getuid()
    while os.getppid() == parent and _still_ours(path, mine):
        try:
            client, _ = listener.accept()
        except TimeoutError:
            continue
        with client:
            client.settimeout(10 * CHECK_S)  # a client that sends nothing cannot hold us
            peer = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            try:
                _, fds, _, _ = socket.recv_fds(client, 1, 1)
            except OSError:
                continue
            if struct.unpack("3i", peer)[1] != uid or not fds or not _single_threaded():
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:  # the child: serve the worker over its end of the pair
                code = 0
                try:
                    listener.close()
                    client.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    serve(Connection(fds[0]), chain)
                except BaseException:
                    code = 1
                os._exit(code)
            os.close(fds[0])
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:  # the child is gone already
                continue
            with contextlib.suppress(OSError):
                socket.send_fds(client, [b"p"], [pidfd])
            os.close(pidfd)
    with contextlib.suppress(OSError):
        if _still_ours(path, mine):
            os.unlink(path)


def _still_ours(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False

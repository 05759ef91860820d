"""Where a run's input files live: local paths, or URIs that pyarrow's filesystems open.

`inputs` may name objects in a bucket (`s3://bucket/corpus/`, `gs://bucket/part-*.parquet`,
or any scheme `pyarrow.fs.FileSystem.from_uri` knows: `hdfs://`, `file://`). The driver
lists them (`expand`), the unit planner sizes them (`size`, and a gzip trailer read by a
seek) and each scoring task opens its unit's files itself (`open_input`), so the corpus
goes from the bucket to the worker that scores it, never through the driver. Credentials
and endpoints come from the environment every node has (for S3 `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL`; for GCS the default
credentials); a URI carries no options, so a row's `source_path` is the object's URI.

Only inputs: the run folder (`--runs-dir`) stays on a POSIX filesystem every node mounts,
because a run renames folders into place (`platform/atomic.py`), which object stores do not
do atomically (docs/corpus.md, "Object storage").
"""

from __future__ import annotations

import fnmatch
import functools
import os
from typing import Any
from urllib.parse import urlsplit

from rayworks.core.errors import RayworksError

GLOB_CHARS = "*?["


def is_uri(path: str) -> bool:
    """Whether `path` names a file through a URI scheme (`s3://...`), not a local path."""
    return "://" in path


@functools.lru_cache(maxsize=32)
def _filesystem(root: str) -> tuple[Any, str]:
    """The filesystem of a URI's scheme and authority, and the path prefix it gives them
    (a bucket for s3 and gs, "" for file and hdfs): built once per root, since building an
    S3 filesystem may ask the service for the bucket's region."""
    from pyarrow import fs as pafs

    filesystem, base = pafs.FileSystem.from_uri(root)
    return filesystem, base.rstrip("/")


def locate(uri: str) -> tuple[Any, str]:
    """`(filesystem, path in it)` of a URI."""
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise RayworksError(
            f"corpus input {uri!r}: a URI with options ('?...'); give endpoints and "
            "credentials through the environment (e.g. AWS_ENDPOINT_URL)."
        )
    filesystem, base = _filesystem(f"{parts.scheme}://{parts.netloc}/")
    return filesystem, base + parts.path


def _uri(uri: str, path: str) -> str:
    """The URI of `path` (a path in `uri`'s filesystem)."""
    parts = urlsplit(uri)
    _, base = _filesystem(f"{parts.scheme}://{parts.netloc}/")
    return f"{parts.scheme}://{parts.netloc}{path[len(base) :]}"


def expand(uri: str) -> list[str]:
    """The file URIs `uri` names: itself (a file), every file under it (a folder or a
    prefix, recursively) or those matching it (a glob, matched by `fnmatch` on the whole
    path: `*` also crosses `/`); [] when nothing is there."""
    from pyarrow import fs as pafs

    filesystem, path = locate(uri)
    cut = min((i for i, c in enumerate(path) if c in GLOB_CHARS), default=-1)
    if cut >= 0:
        if (slash := path.rfind("/", 0, cut)) < 0:
            raise RayworksError(
                f"corpus input {uri!r}: a pattern in the bucket's name; name the bucket."
            )
        folder = path[:slash]
        infos = filesystem.get_file_info(pafs.FileSelector(folder, recursive=True))
        return sorted(
            _uri(uri, i.path)
            for i in infos
            if i.type == pafs.FileType.File and fnmatch.fnmatchcase(i.path, path)
        )
    info = filesystem.get_file_info(path)
    if info.type == pafs.FileType.File:
        return [uri]
    if info.type == pafs.FileType.Directory:
        infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=True))
        return sorted(_uri(uri, i.path) for i in infos if i.type == pafs.FileType.File)
    return []


def size(path: str) -> int:
    """Stored bytes of a local file or of the object a URI names."""
    if not is_uri(path):
        return os.path.getsize(path)
    filesystem, inner = locate(path)
    return int(filesystem.get_file_info(inner).size)


def open_input(path: str) -> Any:
    """A local file or the object a URI names, opened for reading as an Arrow file
    (seekable: parquet reads its footer first, `units.gzip_size` the trailer; and native,
    so parquet reads it without going through Python)."""
    if not is_uri(path):
        import pyarrow as pa

        return pa.OSFile(path, "rb")
    filesystem, inner = locate(path)
    return filesystem.open_input_file(inner)

"""Who may reach a served endpoint, and where secrets come from: secure by default.

- `check_bind`: a server that listens beyond loopback without an API key is an open model
  endpoint; it is refused unless the caller says `insecure_no_auth=True`
  (`--insecure-no-auth`), and even then a warning is printed.
- `resolve_api_key`: the key of `rayworks serve` comes from `--api-key-file`, the
  `RAYWORKS_API_KEY` variable or, discouraged, `--api-key` (argv is visible to every user
  of the machine through `ps`).
- `SecretRef` / `read_secret`: a secret a config needs (the `http` reward's bearer key) is
  named by the environment variable or the file that holds it, never written into the
  config itself, so config.yaml, the HTML report and a Jobs entrypoint hold no secret.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import SecretStr

from rayworks.core.errors import ConfigError, RayworksError

API_KEY_ENV = "RAYWORKS_API_KEY"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and "localhost"; any other name or address is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere: treat it as reachable from outside


class OpenBindError(RayworksError):
    """A non-loopback bind without an API key."""


def check_bind(
    host: str, api_key: str | None, insecure_no_auth: bool = False, warn: bool = True
) -> None:
    """Refuse to serve on a non-loopback `host` without an API key.

    `insecure_no_auth=True` lets it through with a warning on stderr (a trusted network, a
    proxy that authenticates in front of us; `warn=False` for an early check whose server
    call warns later); a loopback bind needs no key.
    """
    if api_key or is_loopback(host):
        return
    if not insecure_no_auth:
        raise OpenBindError(
            f"--host {host} accepts connections from other machines, and no API key is set: "
            f"anyone who reaches {host} could use the model. Set a key ({API_KEY_ENV}=... or "
            "--api-key-file FILE), bind 127.0.0.1, or pass --insecure-no-auth to serve "
            "without one."
        )
    if not warn:
        return
    print(
        f"WARNING: serving on {host} with no API key (--insecure-no-auth): every client "
        "that can reach this address may use the endpoint.",
        file=sys.stderr,
        flush=True,
    )


def read_secret_file(path: str | Path, what: str = "secret") -> str:
    """The first line of `path`, stripped; a clear error if it is missing or empty."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read the {what} file {str(path)!r}: {err.strerror}") from err
    secret = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise ConfigError(f"the {what} file {str(path)!r} is empty")
    return secret


def resolve_api_key(
    api_key: str | None = None,
    api_key_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """The server's API key: `api_key_file`, else `api_key`, else `RAYWORKS_API_KEY`.

    Giving both `api_key` and `api_key_file` is an error (which one is meant?); a key on
    the command line gets a warning, since other users see it in `ps`.
    """
    env = os.environ if env is None else env
    if api_key and api_key_file:
        raise ConfigError("give the API key once: --api-key or --api-key-file, not both")
    if api_key_file:
        return read_secret_file(api_key_file, "API key")
    if api_key:
        print(
            f"WARNING: an API key on the command line is visible to other users (ps); "
            f"prefer --api-key-file FILE or the {API_KEY_ENV} variable.",
            file=sys.stderr,
            flush=True,
        )
        return api_key
    return env.get(API_KEY_ENV) or None


def read_secret(
    env_var: str | None, file: str | Path | None, what: str, env: Mapping[str, str] | None = None
) -> SecretStr | None:
    """A secret named by an environment variable or a file (exactly one, or neither).

    Read where it is used (in the Ray worker that needs it), so a config only ever holds
    the name of the variable or the file's path. The value comes back as `SecretStr`, whose
    repr and str are masked.
    """
    env = os.environ if env is None else env
    if env_var and file:
        raise ConfigError(f"{what}: give api_key_env or api_key_file, not both")
    if file:
        return SecretStr(read_secret_file(file, what))
    if env_var:
        value = env.get(env_var)
        if not value:
            raise ConfigError(
                f"{what}: the environment variable {env_var!r} is not set (or empty) in this "
                "process; on a cluster it must be set on every node (or use api_key_file on "
                "storage every node reads)"
            )
        return SecretStr(value)
    return None

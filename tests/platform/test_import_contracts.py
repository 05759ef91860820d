"""The layer contracts of pyproject.toml (`[tool.importlinter]`, run by `make lint`) hold
on the repository and fail on a copy that breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the package under `tree` (found before the installed one)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package and its pyproject.toml, to break on purpose."""
    out = tmp_path_factory.mktemp("contracts")
    shutil.copytree(
        ROOT / "rayworks", out / "rayworks", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    shutil.copy(ROOT / "pyproject.toml", out / "pyproject.toml")
    return out


def test_the_repository_keeps_its_contracts(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # a model builder reaching up into the platform
        ("models/decoder.py", "from rayworks.platform import serve", "layers"),
        # the platform naming a method
        ("platform/serve.py", "from rayworks.pipelines.speckv import kv_policies", "layers"),
        # one method importing another that is not a named shared package
        ("pipelines/vulcan/config.py", "from rayworks.pipelines.wasi import lora", "pipelines"),
        # a shared package importing a method built on it
        ("pipelines/lm/config.py", "from rayworks.pipelines.rl import algo", "pipelines"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(tree: Path, module: str, line: str, broken: str):
    path = tree / "rayworks" / module
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(f"{original}\n{line}  # noqa\n", encoding="utf-8")
        result = lint_imports(tree)
    finally:
        path.write_text(original, encoding="utf-8")
    assert result.returncode != 0
    # the contract named first in its report section (a platform edge that closes a loop
    # through a pipeline breaks the pipelines contract too)
    assert f"\n{broken}:" in result.stdout.split("Broken contracts")[1]

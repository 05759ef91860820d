"""scripts/gpu_check.py on the CPU: the same checks the GPU run makes, at bf16, and a check
outside its tolerance fails the script."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checks_pass_in_bf16_on_the_cpu(gpu_check, capsys, one_torch_thread):
    assert gpu_check.main(["--device", "cpu", "--tiny"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nok ") + out.startswith("ok ") == 10 and "all checks passed" in out


def test_a_check_outside_its_tolerance_fails(gpu_check, capsys):
    report = gpu_check.Report()
    report.check("agreement", 0.5, 0.9, at_least=True)
    report.check("error", 0.01, 0.03)
    assert report.failed == ["agreement"]
    assert "FAIL agreement" in capsys.readouterr().out

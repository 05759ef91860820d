"""Name lookup imports only the package that registers the name (fresh interpreters)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from rayworks.platform.registry import PIPELINES, get_evaluation, get_pipeline
def loaded():
    prefix = "rayworks.pipelines."
    return sorted(m for m in sys.modules if m.startswith(prefix) and m.count(".") == 2)
get_pipeline("gdr_euclid")
gdr = loaded()
get_pipeline("grpo")
rl = loaded()
get_evaluation("calibration")
evals = sorted(m for m in sys.modules if m.startswith("rayworks.evals."))
print(json.dumps({"gdr": gdr, "rl": rl, "evals": evals, "n": len(PIPELINES)}))
"""


def test_lookup_imports_only_the_package_that_registers_the_name() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["gdr"] == ["rayworks.pipelines.gdr"]
    # grpo lives in rl/grpo.py: found by the source scan, not by a package named grpo
    assert "rayworks.pipelines.rl" in got["rl"] and "rayworks.pipelines.aqer" not in got["rl"]
    assert "rayworks.evals.calibration" in got["evals"]
    assert "rayworks.evals.lm_eval" not in got["evals"]
    assert got["n"] < 20  # not every pipeline was imported (tests/test_cli.py: the fallback)

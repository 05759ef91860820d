"""The VUDG evaluation protocols and their averages (the paper's construction step 5).

- multi-source leave-one-domain-out (`lodo`): train on every domain but i, test on i;
  Avg_m = (1/N) Σ_i P_i over the held-out domains;
- single-source (`single`): train on domain i only, test on every j ≠ i;
  Avg_s = (1/N) Σ_i (1/(N-1)) Σ_{j≠i} P_j^i;
- all-domain (`all`, the upper bound): train on every domain, scored on the same
  held-out domains' test clips as LODO (so the two are comparable domain by domain).

Our recipe runs LODO for 4 held-out domains and single-source from 3 source domains, not
all 11 (reconstructed reduction); N is then the number of domains actually run.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def plan(
    protocol: str, domains: list[str], held_out: list[str], sources: list[str]
) -> list[dict[str, Any]]:
    """Training runs of one protocol: label, train domains, test domains."""
    if protocol == "lodo":
        return [
            {
                "label": f"lodo-{d}",
                "train_domains": [x for x in domains if x != d],
                "test_domains": [d],
            }
            for d in held_out
        ]
    if protocol == "all":
        return [{"label": "all", "train_domains": list(domains), "test_domains": list(held_out)}]
    return [
        {
            "label": f"single-{s}",
            "train_domains": [s],
            "test_domains": [x for x in domains if x != s],
        }
        for s in sources
    ]


def avg_m(held_out_accuracy: dict[str, float]) -> float:
    """Avg_m = (1/N) Σ_i P_i: P_i the accuracy on held-out domain i of the model trained on
    all other domains."""
    return float(np.mean(list(held_out_accuracy.values())))


def avg_s(matrix: dict[str, dict[str, float]]) -> float:
    """Avg_s = (1/N) Σ_i (1/(N-1)) Σ_{j≠i} P_j^i: `matrix[i][j]` is the accuracy on domain j
    of the model trained on source i alone; the diagonal (j = i), if present, is ignored."""
    return float(
        np.mean([np.mean([p for j, p in row.items() if j != i]) for i, row in matrix.items()])
    )

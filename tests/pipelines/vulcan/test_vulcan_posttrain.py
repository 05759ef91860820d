"""Checkpoint selection of the post-training: the gap rule first, then pruned S-val accuracy."""

from __future__ import annotations

from rayworks.pipelines.vulcan.posttrain import Selection


def test_selection_prefers_small_gaps_then_accuracy(tiny_vit) -> None:
    sel = Selection()
    sel.offer(100, tiny_vit, tiny_vit, acc=0.95, pruned_acc=0.80, tolerance=1.0)
    assert (sel.step, sel.gap_ok) == (100, False)
    sel.offer(200, tiny_vit, tiny_vit, acc=0.95, pruned_acc=0.90, tolerance=1.0)
    assert sel.step == 200  # no checkpoint within the gap yet: best pruned accuracy
    sel.offer(300, tiny_vit, tiny_vit, acc=0.85, pruned_acc=0.85, tolerance=1.0)
    assert (sel.step, sel.gap_ok) == (300, True)  # within the gap beats a better pruned acc
    sel.offer(400, tiny_vit, tiny_vit, acc=0.99, pruned_acc=0.97, tolerance=1.0)
    assert sel.step == 300  # a 2-point gap never replaces a checkpoint within the gap
    sel.offer(500, tiny_vit, tiny_vit, acc=0.90, pruned_acc=0.895, tolerance=1.0)
    assert sel.step == 500 and sel.val == 0.895
    assert sel.unpruned is not None and set(sel.unpruned) == set(tiny_vit.state_dict())

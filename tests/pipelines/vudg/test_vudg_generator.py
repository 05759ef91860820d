"""VUDG-mini generator: one scene graph, 11 domains -> same meaning, different pixels."""

from __future__ import annotations

import itertools

import numpy as np

from rayworks.pipelines.vudg.annotate import TYPES, truth
from rayworks.pipelines.vudg.config import DOMAINS
from rayworks.pipelines.vudg.dataset import clip_rng, question_rows, render_clip
from rayworks.pipelines.vudg.scene import RADIUS, SceneGraph, render_layers, sample_scene


def test_same_scene_graph_in_every_domain_gives_same_questions_and_different_pixels() -> None:
    sg = sample_scene(np.random.default_rng(3))
    clips = {d: render_clip(sg, d, 8, 32, np.random.default_rng(0)) for d in DOMAINS}
    assert all(c.shape == (8, 32, 32, 3) and c.dtype == np.uint8 for c in clips.values())
    for a, b in itertools.combinations(DOMAINS, 2):
        diff = np.abs(clips[a].astype(int) - clips[b].astype(int)).mean()
        assert diff > 2, (a, b, diff)  # every pair of domains differs visibly
    # The meaning (questions, answers' values, scene graph) does not depend on the domain:
    # annotate identically, so rows differ only in domain and ids.
    from rayworks.pipelines.vudg.annotate import annotate_clip

    ann = {
        "generator_error": 0.1,
        "synonym_rate": 0.05,
        "verifier_error": 0.1,
        "synonym_recall": 0.7,
    }
    rows = {
        d: question_rows("c", d, "test", sg, annotate_clip(sg, ann, np.random.default_rng(1)).het)
        for d in DOMAINS
    }
    strip = [[{k: v for k, v in r.items() if k != "domain"} for r in rows[d]] for d in DOMAINS]
    assert all(s == strip[0] for s in strip)
    assert {truth(sg, t) for t in TYPES} == {
        truth(SceneGraph.from_json(sg.to_json()), t) for t in TYPES
    }


def test_renderer_reads_the_scene_graph_and_only_it() -> None:
    sg = SceneGraph("star", "red", "ball", ("right", "spin"), (0.4, 0.5))
    a, b = render_layers(sg, 8, 32)[0], render_layers(sg, 8, 32)[0]
    assert np.array_equal(a, b)  # deterministic in the graph
    other = SceneGraph("star", "blue", "ball", ("right", "spin"), (0.4, 0.5))
    assert not np.allclose(a, render_layers(other, 8, 32)[0])
    centre = render_layers(sg, 8, 32)[2]
    assert np.all(np.diff(centre[:4, 0]) > 0) and np.allclose(centre[4:, 0], centre[3, 0])
    assert np.allclose(centre[:, 1], 16)  # "right" then "spin": no vertical motion


def test_sampled_trajectories_stay_in_frame_and_clip_streams_do_not_depend_on_domain_set() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        sg = sample_scene(rng)
        centre = render_layers(sg, 8, 16, supersample=1)[2] / 16
        assert sg.actions[0] != sg.actions[1]
        assert centre.min() >= RADIUS and centre.max() <= 1 - RADIUS
    a = clip_rng(0, "fog", "train", 5).random(3)
    assert np.array_equal(a, clip_rng(0, "fog", "train", 5).random(3))
    assert not np.array_equal(a, clip_rng(0, "night", "train", 5).random(3))

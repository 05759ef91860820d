"""The RL math against hand-computed cases, closed forms and exact counts."""

from __future__ import annotations

import itertools

import pytest
import torch

from rayworks.pipelines.rl import algo


def test_gae_matches_a_hand_computed_case():
    # One sequence of 3 real tokens and one pad; outcome reward 1 on the last token.
    values = torch.tensor([[0.5, 0.6, 0.7, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    rewards = algo.outcome_to_token_rewards(torch.tensor([1.0]), mask)
    assert rewards.tolist() == [[0.0, 0.0, 1.0, 0.0]]
    gamma, lam = 0.9, 0.8
    d2 = 1.0 - 0.7  # V after the end is 0
    d1 = 0.0 + gamma * 0.7 - 0.6
    d0 = 0.0 + gamma * 0.6 - 0.5
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    adv, ret = algo.gae_advantages(rewards, values, mask, gamma, lam)
    assert adv[0, :3].tolist() == pytest.approx([a0, a1, a2])
    assert adv[0, 3] == 0 and ret[0, 3] == 0  # padding carries nothing, even with V=9 there
    assert ret[0, :3].tolist() == pytest.approx([a0 + 0.5, a1 + 0.6, a2 + 0.7])


def test_gae_with_lambda_one_is_return_minus_value():
    values = torch.rand(4, 6)
    mask = torch.ones(4, 6)
    rewards = torch.rand(4, 6)
    adv, _ = algo.gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    mc_return = rewards.flip(1).cumsum(1).flip(1)
    assert torch.allclose(adv, mc_return - values, atol=1e-5)


def test_grpo_advantages_normalise_per_group_and_survive_equal_rewards():
    mask = torch.ones(6, 3)
    adv, returns = algo.grpo_advantages(
        torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), mask, group_size=3
    )
    assert returns is None
    first = adv[:3, 0]
    assert first.sum().abs() < 1e-5 and first[0] > 0 > first[1]
    assert torch.equal(adv[3:], torch.zeros(3, 3))  # all-equal group: exactly zero, no NaN
    with pytest.raises(ValueError, match="groups of 4"):
        algo.grpo_advantages(torch.ones(6), mask, group_size=4)


def test_kl_estimators_match_the_closed_form_in_expectation():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.5, 0.3])
    exact = float((p * (p / q).log()).sum())
    for kind in ("k1", "k3"):  # unbiased: E_p[k] = KL(p || q) exactly
        expected = float((p * algo.kl_estimate(p.log(), q.log(), kind)).sum())
        assert expected == pytest.approx(exact, rel=1e-5), kind
    assert (algo.kl_estimate(p.log(), q.log(), "k3") >= 0).all()
    assert float((p * algo.kl_estimate(p.log(), q.log(), "k2")).sum()) > 0
    assert algo.kl_estimate(p.log(), p.log(), "k3").abs().max() == 0
    with pytest.raises(ValueError, match="k4"):
        algo.kl_estimate(p, q, "k4")


def test_entropy_of_uniform_logits_is_log_vocab():
    ent = algo.entropy_from_logits(torch.zeros(2, 3, 8))
    assert torch.allclose(ent, torch.full((2, 3), torch.log(torch.tensor(8.0))))


def test_clipped_loss_is_zero_at_ratio_one_with_centred_advantages_and_clips_high_separately():
    mask = torch.ones(2, 2)
    logp = torch.zeros(2, 2)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    loss, stats = algo.clipped_policy_loss(logp, logp, adv, mask)
    assert float(loss) == 0.0 and stats["clip_frac"] == 0.0
    # ratio 1.5 with positive advantage: clip-higher caps at 1 + eps_high.
    new = torch.full((1, 1), 1.5).log()
    old = torch.zeros(1, 1)
    one = torch.ones(1, 1)
    low, _ = algo.clipped_policy_loss(new, old, one, one, eps_low=0.2, eps_high=0.2)
    high, stats = algo.clipped_policy_loss(new, old, one, one, eps_low=0.2, eps_high=0.28)
    assert float(low) == pytest.approx(-1.2) and float(high) == pytest.approx(-1.28)
    assert stats["clip_frac"] == 1.0


def test_clipped_loss_masks_and_entropy_bonus():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    logp = torch.zeros(1, 3)
    adv = torch.tensor([[2.0, 4.0, 100.0]])
    adv_mask = torch.tensor([[0.0, 1.0, 1.0]])
    entropy = torch.tensor([[1.0, 3.0, 50.0]])
    ent_mask = torch.tensor([[1.0, 0.0, 1.0]])
    loss, _ = algo.clipped_policy_loss(
        logp,
        logp,
        adv,
        mask,
        adv_mask=adv_mask,
        entropy=entropy,
        entropy_coef=0.5,
        entropy_mask=ent_mask,
    )
    # token 0: -(0) - 0.5*1 ; token 1: -(4) - 0 ; token 2 is padding.
    assert float(loss) == pytest.approx((-0.5 - 4.0) / 2)
    seq, _ = algo.clipped_policy_loss(logp, logp, adv, mask, agg="seq-mean-token-mean")
    assert float(seq) == pytest.approx(-3.0)


def test_value_loss_clipping():
    mask = torch.ones(1, 1)
    ret = torch.zeros(1, 1)
    plain = algo.value_loss(torch.full((1, 1), 1.0), ret, mask)
    clipped = algo.value_loss(
        torch.full((1, 1), 0.1), ret, mask, old_values=torch.ones(1, 1), clip=0.2
    )
    assert float(plain) == 0.5
    assert float(clipped) == pytest.approx(0.5 * 0.8**2)  # the clipped value 0.8 is worse


@pytest.mark.parametrize(
    ("n_prompts", "group", "critics"), [(3, 4, 2), (2, 5, 2), (4, 3, 3), (2, 2, 4)]
)
@pytest.mark.parametrize("mode", ["responses", "prompts"])
def test_split_covers_each_response_once(n_prompts, group, critics, mode):
    shards = algo.split_responses(n_prompts, group, critics, seed=1, mode=mode)
    flat = sorted(itertools.chain.from_iterable(shards))
    assert flat == list(range(n_prompts * group))
    if mode == "responses" and group >= critics:  # every critic sees every prompt
        for shard in shards:
            assert {i // group for i in shard} == set(range(n_prompts))
            assert abs(len(shard) - n_prompts * group / critics) <= n_prompts
    if mode == "prompts":  # whole prompts, disjoint across critics
        seen = [{i // group for i in shard} for shard in shards]
        assert sum(len(s) for s in seen) == n_prompts


def test_ensemble_mean_min_and_population_std():
    values = torch.tensor([[[1.0, 2.0]], [[3.0, 2.0]]])  # (M=2, B=1, T=2)
    bar, sigma = algo.ensemble_values(values)
    assert bar.tolist() == [[2.0, 2.0]] and sigma.tolist() == [[1.0, 0.0]]
    low, _ = algo.ensemble_values(values, agg="min")
    assert low.tolist() == [[1.0, 2.0]]


def test_low_k_and_top_h_masks_exact_counts_ties_and_padding():
    sigma = torch.tensor([[0.1, 0.5, 0.5, 0.9, 0.0], [0.3, 0.5, 0.5, 0.5, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 0.0]])  # last is padding
    low = algo.low_k_mask(sigma, mask, k=0.25)  # 9 valid tokens -> drop floor(2.25) = 2
    assert int((mask - low).sum()) == 2
    assert low[0, 4] == 0 and low[0, 0] == 0  # the two smallest sigmas (0.0, 0.1)
    assert low[1, 4] == 0  # padding stays 0 and is never ranked
    top = algo.top_h_mask(sigma, mask, h=0.25)
    assert int((mask - top).sum()) == 2 and top[0, 3] == 0  # 0.9 dropped, not the padded 7.0
    # Ties: four tokens share sigma 0.5; dropping 3 of the top keeps counts exact.
    tied = algo.top_h_mask(sigma, mask, h=0.4)  # floor(3.6) = 3
    assert int((mask - tied).sum()) == 3
    assert torch.equal(algo.low_k_mask(sigma, mask, k=0.0), mask)
    with pytest.raises(ValueError):
        algo.low_k_mask(sigma, mask, k=1.5)


def test_per_sequence_ranking_drops_within_each_row():
    sigma = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]])
    mask = torch.ones(2, 4)
    batch = algo.low_k_mask(sigma, mask, k=0.5)
    assert batch[0].sum() == 0 and batch[1].sum() == 4  # batch-global: the low row goes
    per_row = algo.low_k_mask(sigma, mask, k=0.5, per_sequence=True)
    assert per_row.sum(dim=1).tolist() == [2.0, 2.0]


def test_registries_hold_the_estimators_and_losses():
    assert {"grpo", "gae"} <= set(algo.ADVANTAGES)
    assert "clipped" in algo.POLICY_LOSSES

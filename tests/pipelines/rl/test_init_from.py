"""`policy.init_from`: a user's HF causal LM (GPT-2 or Llama style) through the rollout
engine, the learner and the config; a chat template wraps prompts with exactly one BOS."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from tokenizers import processors
from transformers import GPT2LMHeadModel

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.models import (
    DecoderSpec,
    TokenizerSpec,
    decoder_for,
    load_causal_lm,
    load_tokenizer,
    train_tokenizer,
)
from rayworks.models.value import ValueModel
from rayworks.pipelines.lm.train_loop import Dist, Learner
from rayworks.pipelines.rl.algo import masked_mean
from rayworks.pipelines.rl.batch import Estimate, make_batch
from rayworks.pipelines.rl.config import RLConfig
from rayworks.pipelines.rl.learner import logp_of, policy_update
from rayworks.platform.rollout import HFEngine, SamplingConfig, encode_prompts

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["Q: what is 3 plus 4?\nA: 7", "Q: reach 24 with 3 8\nA: 3*8", "hello world"] * 10
PROMPTS = ["Q: what is 3 plus 4?", "Q: a", "hello world, hello"]  # lengths differ: left padding
CHAT = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def gpt2_dir(tiny_gpt2) -> Path:
    return tiny_gpt2(TEXTS)


@pytest.fixture(scope="module")
def chat_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama whose tokenizer adds BOS itself and whose chat template writes one too."""
    path = tmp_path_factory.mktemp("chat_llama")
    tok = train_tokenizer(TokenizerSpec(), [f"<|user|>{t}\n<|assistant|>" for t in TEXTS])
    bos = tok.bos_token_id
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    tok.chat_template = CHAT
    torch.manual_seed(0)
    decoder_for(DecoderSpec(d_model=32, n_layer=1, n_head=2, max_seq_len=128), tok).save_pretrained(
        path
    )
    tok.save_pretrained(path)
    return path


def logp_gap(model, rollouts, pad: int, temperature: float) -> tuple[float, float]:
    """(mean, max) |engine - learner| logprob over response tokens: `rollout_logp_gap`."""
    batch = make_batch(rollouts, [0.0] * len(rollouts), pad)
    diff = (logp_of(model, batch, temperature) - batch.old_logp).abs()
    return float(masked_mean(diff, batch.response_mask)), float((diff * batch.response_mask).max())


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_gpt2_engine_logprobs_equal_the_learners(gpt2_dir, temperature):
    engine = HFEngine(gpt2_dir)
    assert engine.tok.pad_token_id is None and engine.eos.tolist() == [engine.tok.eos_token_id]
    assert engine.context == 128 and not engine.chat  # GPT2Config's n_positions; no template
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=10, seed=0)
    rollouts = engine.generate(PROMPTS, 2, sampling)
    assert len({len(r.prompt_ids) for r in rollouts}) == len(PROMPTS)
    assert rollouts[0].prompt_ids == engine.tok(PROMPTS[0]).input_ids  # no BOS added
    model = load_causal_lm(gpt2_dir)
    assert isinstance(model, GPT2LMHeadModel)
    mean, worst = logp_gap(model, rollouts, engine.pad, temperature)
    assert mean < 1e-6 and worst < 1e-4


def test_gpt2_greedy_equals_transformers_generate(gpt2_dir):
    engine = HFEngine(gpt2_dir)
    (r,) = engine.generate(PROMPTS[:1], 1, SamplingConfig(temperature=0.0, max_new_tokens=10))
    ids = torch.tensor([r.prompt_ids])
    want = engine.model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=10,
        pad_token_id=engine.tok.eos_token_id,
    )
    assert r.completion_ids == want[0, ids.shape[1] :].tolist()[: len(r.completion_ids)]


def test_gpt2_policy_update_trains_and_a_gpt2_critic_scores(gpt2_dir):
    cfg = build_config(
        RLConfig,
        "smoke",
        (),
        ["rollout.prompts_per_step=1", "loss.minibatches=1", "learner.lr=0.01"],
    )
    engine = HFEngine(gpt2_dir)
    rollouts = engine.generate(PROMPTS[:1], 4, SamplingConfig(max_new_tokens=8, seed=0))
    batch = make_batch(rollouts, [1.0, 0.0, 0.0, 0.0], engine.pad)
    learner = Learner(cfg.learner, load_causal_lm(gpt2_dir), Dist(), micro_batch=4)
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5])[:, None] * batch.response_mask
    stats = policy_update(
        learner,
        load_causal_lm(gpt2_dir).eval(),
        batch,
        Estimate(advantages=adv),
        cfg,
        Dist(),
        step=0,
    )
    assert stats["rollout_logp_gap"] < 1e-5 and stats["policy_loss"] != 0.0
    values = ValueModel.from_pretrained(gpt2_dir)(**batch.model_inputs)  # critic = policy copy
    assert values.shape == batch.input_ids.shape and torch.isfinite(values).all()


def test_chat_template_wraps_prompts_with_exactly_one_bos(chat_llama_dir):
    tok = load_tokenizer(chat_llama_dir)
    bos = tok.bos_token_id
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Q: a"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<s><|user|>Q: a\n<|assistant|>"
    assert tok(text).input_ids[:2] == [bos, bos]  # the hazard: template BOS + tokenizer BOS
    (ids,) = encode_prompts(tok, ["Q: a"], 128, 8, chat=True)
    assert ids == tok(text, add_special_tokens=False).input_ids
    assert ids[0] == bos and ids.count(bos) == 1

    engine = HFEngine(chat_llama_dir)
    assert engine.chat
    rollouts = engine.generate(["Q: a", "hello"], 2, SamplingConfig(max_new_tokens=6, seed=0))
    assert rollouts[0].prompt_ids == ids and all(r.prompt_ids.count(bos) == 1 for r in rollouts)
    mean, worst = logp_gap(engine.model, rollouts, engine.pad, 1.0)  # the learner re-scores them
    assert mean < 1e-6 and worst < 1e-4

    raw = HFEngine(chat_llama_dir, chat_template=False)  # policy.chat_template=false
    (r,) = raw.generate(["Q: a"], 1, SamplingConfig(temperature=0.0, max_new_tokens=2))
    assert r.prompt_ids == tok("Q: a").input_ids and r.prompt_ids.count(bos) == 1


def test_init_from_takes_model_folders_and_run_dirs_and_names_bad_ones(
    gpt2_dir, tmp_path, monkeypatch
):
    run_dir = tmp_path / "runs" / "grpo" / "r1"
    shutil.copytree(gpt2_dir, run_dir / "artifacts" / "model")
    monkeypatch.chdir(tmp_path)
    cfg = build_config(RLConfig, "smoke", (), ["policy.init_from=runs/grpo/r1"])
    assert cfg.policy.init_from == str(run_dir)  # absolute: Ray workers run elsewhere
    assert build_config(RLConfig, None, (), [f"policy.init_from={gpt2_dir}"]).policy.chat_template

    with pytest.raises(ConfigError, match=r"policy\.init_from='nowhere' is invalid.*no model"):
        build_config(RLConfig, "smoke", (), ["policy.init_from=nowhere"])
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(gpt2_dir / name, bare / name)
    with pytest.raises(ConfigError, match=r"policy\.init_from=.*has no tokenizer"):
        build_config(RLConfig, "smoke", (), [f"policy.init_from={bare}"])
    with pytest.raises(ConfigError, match=r"unknown key 'policy\.path'.*init_from"):  # renamed
        build_config(RLConfig, "smoke", (), [f"policy.path={gpt2_dir}"])

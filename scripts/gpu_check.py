"""GPU readiness of the RL stack: policy and critic forward/backward, one learner step,
KV-cache generation and `kv_forward` on an accelerator in bf16, each checked against the
same computation in float32 on the CPU, with tokens/s.

    python scripts/gpu_check.py                      # cuda, bfloat16, d_model 256, 4 layers
    python scripts/gpu_check.py --device cpu --tiny  # the same checks on the CPU (CI runs it)

Needs torch and transformers only (Ray and vLLM are not imported). Prints one line per
check with the measured error and its tolerance, then the timings; exits 1 if a check is
outside its tolerance. The tolerances are bf16's: an 8-bit mantissa gives ~3 decimal
digits per operand, with float32 accumulation in matmuls on both devices.

  policy forward    token logprobs |bf16 - fp32|: mean <= 0.03, 99th percentile <= 0.25
  policy backward   cosine(grad bf16, grad fp32) over all parameters >= 0.98
  critic            values |bf16 - fp32| mean <= 0.03; grad cosine >= 0.98
  learner step      clipped-ratio loss + AdamW: cosine of the parameter updates >= 0.9
                    (Adam normalises each coordinate, so tiny gradients flip signs)
  generation        greedy KV-cache decode from the same weights: first-token agreement
                    >= 0.9 (bf16 flips near-ties) and the decode's logits equal a full
                    forward over the generated rows on the device (mean |diff| <= 0.05)
  kv_forward        the explicit forward equals the HF forward on the device
                    (mean |logit diff| <= 0.05) and the fp32 CPU one (<= 0.1)
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rayworks.models.decoder import DecoderSpec, build_decoder
from rayworks.models.generate import KVDecoder
from rayworks.models.kv_forward import forward as kv_forward
from rayworks.models.value import ValueModel
from rayworks.pipelines.rl.algo import POLICY_LOSSES

VOCAB = 512


class Report:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, name: str, value: float, limit: float, at_least: bool = False) -> None:
        ok = value >= limit if at_least else value <= limit
        sign = ">=" if at_least else "<="
        print(f"{'ok ' if ok else 'FAIL'} {name:<46} {value:10.4f}  (tolerance {sign} {limit})")
        if not ok:
            self.failed.append(name)


def cosine(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    x = torch.cat([t.float().flatten().cpu() for t in a])
    y = torch.cat([t.float().flatten().cpu() for t in b])
    return float(torch.nn.functional.cosine_similarity(x, y, dim=0))


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def token_logp(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--tiny", action="store_true", help="d_model 64, 2 layers, batch 8")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu for the CPU dry run")
        return 2
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    d_model, layers, batch, seq, new = (64, 2, 8, 32, 16) if args.tiny else (256, 4, 64, 64, 64)
    torch.manual_seed(0)
    spec = DecoderSpec(d_model=d_model, n_layer=layers, n_head=4, max_seq_len=seq + new + 8)
    ref = build_decoder(spec, VOCAB).float().eval()
    test = copy.deepcopy(ref).to(dev, dtype)
    ids = torch.randint(3, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1))
    report = Report()
    print(
        f"torch {torch.__version__}, device {dev}, {args.dtype}, d_model {d_model}, {layers} layers"
    )

    # policy forward / backward
    lp_ref = token_logp(ref, ids)
    lp_ref.sum().backward()
    lp = token_logp(test, ids.to(dev))
    lp.sum().backward()
    err = (lp.detach().cpu() - lp_ref.detach()).abs()
    report.check("policy forward: logprob mean |err|", float(err.mean()), 0.03)
    report.check("policy forward: logprob p99 |err|", float(err.quantile(0.99)), 0.25)
    report.check("policy backward: grad cosine", cosine(grads(test), grads(ref)), 0.98, True)

    # critic: a value head on a copy of the backbone
    critic_ref = ValueModel(copy.deepcopy(ref))
    torch.nn.init.normal_(critic_ref.head.weight, std=0.02)
    critic = copy.deepcopy(critic_ref).to(dev, dtype)
    v_ref, v = critic_ref(ids), critic(ids.to(dev))
    (v_ref**2).mean().backward()
    (v.float() ** 2).mean().backward()
    report.check("critic: value mean |err|", float((v.float().cpu() - v_ref).abs().mean()), 0.03)
    report.check("critic: grad cosine", cosine(grads(critic), grads(critic_ref)), 0.98, True)

    # one learner step: clipped ratio against the frozen logprobs, AdamW
    adv = torch.randn(batch, 1, generator=torch.Generator().manual_seed(2)).expand(-1, seq - 1)
    mask = torch.ones(batch, seq - 1)
    updates = []
    for model, device in ((ref, "cpu"), (test, dev)):
        model.zero_grad(set_to_none=True)
        before = [p.detach().float().cpu().clone() for p in model.parameters()]
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        started = time.perf_counter()
        logp = token_logp(model, ids.to(device))
        loss, _ = POLICY_LOSSES["clipped"](
            logp, logp.detach() - 0.05, adv.to(device), mask.to(device)
        )
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        step_s = time.perf_counter() - started
        updates.append(
            [p.detach().float().cpu() - b for p, b in zip(model.parameters(), before, strict=True)]
        )
    report.check("learner step: update cosine", cosine(updates[1], updates[0]), 0.9, True)
    ref.eval()
    test.eval()

    # KV-cache generation (greedy) from the same, now updated, weights
    rows = ids[:, : seq // 2].tolist()
    tokens = {}
    started = time.perf_counter()
    for model, device in ((ref, "cpu"), (test, dev)):
        dec = KVDecoder(model, rows, 0, device)
        out = []
        for i in range(new):
            if i:
                dec.step(out[-1])
            out.append(dec.logits.float().argmax(-1))
        tokens[str(device)] = torch.stack(out, 1).cpu()
        if device == dev and dev.type == "cuda":
            torch.cuda.synchronize()
        if device == "cpu":
            started = time.perf_counter()
    gen_s = time.perf_counter() - started
    ours, theirs = tokens[str(dev)], tokens["cpu"]
    report.check(
        "generation: first-token agreement",
        float((ours[:, 0] == theirs[:, 0]).float().mean()),
        0.9,
        True,
    )
    full = torch.cat([torch.tensor(rows), ours], 1).to(dev)
    with torch.no_grad():
        dec = KVDecoder(test, rows, 0, dev)
        step_logits = [dec.logits.float()]
        for t in range(new - 1):
            step_logits.append(dec.step(ours[:, t].to(dev)).float())
        full_logits = test(input_ids=full).logits[:, seq // 2 - 1 : -1].float()
    diff = (torch.stack(step_logits, 1) - full_logits).abs().mean()
    report.check("generation: KV decode vs full forward |diff|", float(diff), 0.05)

    # kv_forward against HF's forward
    with torch.no_grad():
        explicit = kv_forward(test, ids.to(dev)).float()
        hf = test(input_ids=ids.to(dev)).logits.float()
        fp32 = ref(input_ids=ids).logits
    report.check(
        "kv_forward vs HF forward (device) |diff|", float((explicit - hf).abs().mean()), 0.05
    )
    report.check("kv_forward vs fp32 CPU |diff|", float((explicit.cpu() - fp32).abs().mean()), 0.1)

    print(
        f"timings on {dev}: learner step {step_s * 1000:.1f} ms ({batch} x {seq} tokens); "
        f"greedy KV decode {batch * new / gen_s:,.0f} tokens/s ({batch} rows x {new} tokens)"
    )
    if report.failed:
        print(f"{len(report.failed)} check(s) failed: {', '.join(report.failed)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Batched rollout throughput: ``sample_hf`` with many prompts per batch vs one prompt at a time.

Both sides are production ``rollout.sample_hf`` on the same random-initialised Qwen3-shaped model
with the same settings; only ``batch_size`` differs (``--batch-size`` vs 1). Throughput is generated
tokens (up to and including the first stop id) per second. The one-at-a-time side runs the first
``--sequential-prompts`` prompts only, because it is the slow one and tokens/s is a rate; both use
the same prompt-length distribution. Warm-up first; the two sides alternate over ``--repeats``.

    python benchmarks/bench_rollout.py
    python benchmarks/bench_rollout.py --device cuda --dtype bfloat16 --hidden 2048 --layers 28 ...
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench_scoring import add_model_args, machine, make_model, sync  # noqa: E402

from opsd_diag.engine.sampling import sample_hf  # noqa: E402
from opsd_diag.config.settings import SamplingSettings  # noqa: E402

TARGET = 5.0
STOP_ID = 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p, hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, intermediate=768, vocab=32768)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32, help="sample_hf batch size of the batched side")
    p.add_argument("--sequential-prompts", type=int, default=8, help="prompts run one at a time")
    p.add_argument("--prompt-len", type=int, default=48)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--target", type=float, default=TARGET)
    a = p.parse_args(argv)
    if a.threads and a.device == "cpu":
        torch.set_num_threads(a.threads)

    model = make_model(a, a.seed)
    tok = SimpleNamespace(pad_token_id=0)  # sample_hf only needs the pad id; ids in, ids out
    g = torch.Generator().manual_seed(a.seed)
    prompts = [torch.randint(3, a.vocab, (int(torch.randint(a.prompt_len // 2, a.prompt_len + 1, (1,), generator=g)),),
                             generator=g).tolist() for _ in range(a.prompts)]
    seq_prompts = prompts[:a.sequential_prompts]

    def settings(batch_size: int, max_new: int) -> SamplingSettings:
        return SamplingSettings(num_samples=1, temperature=a.temperature, top_p=a.top_p, max_new_tokens=max_new,
                                seed=a.seed, batch_size=batch_size)

    def timed(ps, batch_size):
        sync(a.device)
        t0 = time.perf_counter()
        out = sample_hf(model, tok, ps, settings(batch_size, a.max_new_tokens), [STOP_ID])
        sync(a.device)
        return sum(len(c.ids) for cs in out for c in cs), time.perf_counter() - t0

    sample_hf(model, tok, prompts, settings(a.batch_size, 4), [STOP_ID])  # warm-up both shapes
    sample_hf(model, tok, seq_prompts[:1], settings(1, 4), [STOP_ID])
    runs = {"batched": [], "one at a time": []}
    for i in range(a.repeats):
        order = [("batched", prompts, a.batch_size), ("one at a time", seq_prompts, 1)]
        for name, ps, bs in (order if i % 2 == 0 else order[::-1]):
            runs[name].append(timed(ps, bs))
    rate = {k: statistics.median(n / s for n, s in v) for k, v in runs.items()}
    ratio = rate["batched"] / rate["one at a time"]

    print(f"## bench_rollout: batched vs one-at-a-time sampling ({a.device}, {a.dtype}, {machine(a.device)})")
    print(f"model: Qwen3-shaped hidden={a.hidden} layers={a.layers} heads={a.heads}/{a.kv_heads} vocab={a.vocab}; "
          f"prompts<={a.prompt_len} tokens, max_new_tokens={a.max_new_tokens}, temperature={a.temperature}, "
          f"top_p={a.top_p}; {a.repeats} repeat(s) after warm-up")
    print()
    print(f"| {'side':32} | {'prompts':>7} | {'tokens':>7} | {'seconds':>8} | {'tokens/s':>9} |")
    print(f"|{'-' * 34}|{'-' * 9}|{'-' * 9}|{'-' * 10}|{'-' * 11}|")
    for name, ps, bs in (("batched", prompts, a.batch_size), ("one at a time", seq_prompts, 1)):
        n, s = runs[name][-1]
        label = f"{name} (batch_size={bs})"
        print(f"| {label:32} | {len(ps):7} | {n:7} | {s:8.2f} | {rate[name]:9.1f} |")
    print()
    verdict = "PASS" if ratio >= a.target else "FAIL"
    print(f"RESULT batched/one-at-a-time tokens/s = {ratio:.2f}x  target >= {a.target:.1f}x  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

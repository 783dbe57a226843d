"""Scoring overhead: full ``score_batch`` time / bare forward time of the same model-view pairs.

What runs (the diagnostic's default ``base_view: student``, one external and one self teacher):

    pair               model     prompt the model sees
    student            student   student view (question)
    teacher (OPD)      teacher   student view
    self+context       student   teacher view (question + privileged context)
    base               base      student view

``bare`` is ``model(input_ids, attention_mask, position_ids)`` with full logits for each pair, on
the exact packed tensors ``score_batch`` builds (``benchmarks/reference.py``). ``scoring`` is one ``score_batch``
call: the four decoder forwards, the chunked LM heads, every signal of docs/signals.md for both teacher
configs, top-k. The two are timed alternately (warm-up, then ``--repeats`` pairs) and the ratio of
the medians is reported, so drift from other jobs on the machine hits both sides alike.

Two extra lines help read the number: ``decoder only`` (the four ``completion_hidden`` calls) and
a ``strict`` baseline (decoder + one LM head matmul over the scored positions only, i.e. the least
work that yields the logits scoring needs). The target applies to ``scoring / bare``.

Why the CPU default shape (hidden 512, 8 layers, vocab 32,768, 4 rollouts of <= 192 tokens after
prompts of <= 64 / <= 160 tokens): the overhead is the vocabulary-wide signal work (O(V) per token
per teacher) against the forward (O(12 H^2 L + H V) per token per model). A model of a real size
cannot run here, so the shape keeps the forward dominated by the decoder and the LM head as in a
small real model while staying at seconds per pass on one core. It is still about 9x more
signal-heavy per token than Qwen3-1.7B (V / (12 H^2 L + H V): 7.8e-4 here, 8.9e-5 there), so a
CPU pass is a conservative bound; ``gpu_check.sh`` measures the real shape.

    python benchmarks/bench_scoring.py                       # CPU defaults (see --help)
    python benchmarks/bench_scoring.py --device cuda --dtype bfloat16 --hidden 2048 --layers 28 ...
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from reference import pack  # noqa: E402

from opsd_diag.engine.fast import fused_scoring  # noqa: E402
from opsd_diag.engine.scoring import TeacherInput, completion_hidden, score_batch  # noqa: E402
from opsd_diag.config.spec import ScoringSpec  # noqa: E402

TARGET = 1.10
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_model_args(p: argparse.ArgumentParser, *, hidden: int, layers: int, heads: int, kv_heads: int,
                   head_dim: int, intermediate: int, vocab: int) -> None:
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--hidden", type=int, default=hidden)
    p.add_argument("--layers", type=int, default=layers)
    p.add_argument("--heads", type=int, default=heads)
    p.add_argument("--kv-heads", type=int, default=kv_heads)
    p.add_argument("--head-dim", type=int, default=head_dim)
    p.add_argument("--intermediate", type=int, default=intermediate)
    p.add_argument("--vocab", type=int, default=vocab)
    p.add_argument("--untied", action="store_true", help="separate LM head (Qwen3-1.7B ties it)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (0: torch's default). 1 by default: on shared cores, OpenMP "
                        "threads that wait for a descheduled sibling make timings noise")
    p.add_argument("--seed", type=int, default=0)


def make_model(a: argparse.Namespace, seed: int) -> torch.nn.Module:
    """A random-initialised Qwen3-shaped causal LM, built directly on the target device."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
                      intermediate_size=a.intermediate, tie_word_embeddings=not a.untied,
                      max_position_embeddings=4096, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    with torch.device(a.device):
        model = Qwen3ForCausalLM(cfg)
    return model.to(DTYPES[a.dtype]).eval()


def param_bytes(model: torch.nn.Module) -> int:
    seen = {}
    for prm in model.parameters():  # tied embeddings count once
        seen[prm.data_ptr()] = prm.numel() * prm.element_size()
    return sum(seen.values())


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def machine(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name()
    load = ", load avg %.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    return f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads{load}"


def make_batch(batch: int, prompt_len: int, context_len: int, completion_len: int, vocab: int, seed: int):
    """Student prompts, self-teacher prompts (prompt + context) and completions, as token id lists.

    Lengths are ragged (75-100% of the prompt/context length, 50-100% of the completion length)
    so padding and masks are exercised as in a real batch.
    """
    g = torch.Generator().manual_seed(seed)

    def length(n: int, lo: float) -> int:
        return int(torch.randint(max(1, int(n * lo)), n + 1, (1,), generator=g))

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    student, teacher, completions = [], [], []
    for _ in range(batch):
        p = ids(length(prompt_len, 0.75))
        student.append(p)
        teacher.append(ids(length(context_len, 0.75)) + p if context_len else list(p))
        completions.append(ids(length(completion_len, 0.5)))
    return student, teacher, completions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p, hidden=512, layers=8, heads=8, kv_heads=4, head_dim=64, intermediate=1536, vocab=32768)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--context-len", type=int, default=96, help="privileged context added to the self-teacher view")
    p.add_argument("--completion-len", type=int, default=192)
    p.add_argument("--chunk-size", default="256,32",
                   help="score_batch chunk size(s), comma-separated: one scoring row each; 256 is the config default")
    p.add_argument("--engines", default="reference",
                   help="scoring engines, comma-separated: reference (score_batch), fused, compiled "
                        "(opsd_diag.engine.fast.fused_scoring); one scoring row per engine and chunk size")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--target", type=float, default=TARGET)
    a = p.parse_args(argv)
    if a.threads and a.device == "cpu":
        torch.set_num_threads(a.threads)

    student, teacher, base = make_model(a, a.seed), make_model(a, a.seed + 1), make_model(a, a.seed + 2)
    s_prompts, t_prompts, comps = make_batch(a.batch, a.prompt_len, a.context_len, a.completion_len, a.vocab, a.seed)
    n_tokens = sum(len(c) for c in comps)
    teachers = {"opd": TeacherInput(teacher, s_prompts), "self+context": TeacherInput(student, t_prompts)}
    chunks = [int(c) for c in str(a.chunk_size).split(",") if c]
    pairs = [(student, s_prompts), (teacher, s_prompts), (student, t_prompts), (base, s_prompts)]

    @torch.no_grad()
    def bare():
        for model, prompts in pairs:
            ids, att, pos, _ = pack(prompts, comps, 0)
            model(input_ids=ids.to(a.device), attention_mask=att.to(a.device), position_ids=pos.to(a.device),
                  use_cache=False).logits

    def scoring(chunk: int, engine: str = "reference"):
        settings = ScoringSpec(chunk_size=chunk).settings(1.0)  # full centring, top-5, ExOPD vs student
        score = fused_scoring.pick(score_batch, engine)
        return lambda: score(student, comps, s_prompts, teachers, settings, 0, base=base, base_prompts=s_prompts)

    engines = [e for e in a.engines.split(",") if e]
    label = (lambda c, e: f"scoring (score_batch, chunk_size={c})" if e == "reference"
             else f"scoring ({e}, chunk_size={c})")

    def decoder_only():
        for model, prompts in pairs:
            completion_hidden(model, prompts, comps, 0)

    @torch.no_grad()
    def strict():
        for model, prompts in pairs:
            model.get_output_embeddings()(completion_hidden(model, prompts, comps, 0)).float()  # [N, V]

    fns = {"bare forwards (full logits)": bare,
           **{label(c, e): scoring(c, e) for e in engines for c in chunks},
           "decoder only (4x completion_hidden)": decoder_only, "strict: decoder + head on scored tokens": strict}
    times: dict[str, list[float]] = {k: [] for k in fns}
    first: dict[str, float] = {}  # the first call's time (a compile happens there)
    failed: dict[str, str] = {}  # engine -> why: a failed engine (a compile error) loses its own rows only
    for i in range(a.warmup + a.repeats):
        order = list(fns) if i % 2 == 0 else list(reversed(fns))  # alternate so drift hits all sides alike
        for name in order:
            sync(a.device)
            t0 = time.perf_counter()
            engine = next((e for e in engines for c in chunks if name == label(c, e)), None)
            if engine in failed:
                continue
            try:
                fns[name]()
            except Exception as e:  # noqa: BLE001 - only scoring rows may fail; the baselines must run
                if engine is None:
                    raise
                failed[engine] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                print(f"engine: {engine} failed: {failed[engine]}", flush=True)
                continue
            sync(a.device)
            if i >= a.warmup:
                times[name].append(time.perf_counter() - t0)
            first.setdefault(name, time.perf_counter() - t0)
    engines = [e for e in engines if e not in failed]
    times = {k: v for k, v in times.items() if v}
    med = {k: statistics.median(v) for k, v in times.items()}
    bare_t = med["bare forwards (full logits)"]
    scored = {(c, e): med[label(c, e)] for e in engines for c in chunks}

    print(f"## bench_scoring: scoring overhead ({a.device}, {a.dtype}, {machine(a.device)})")
    print(f"model: Qwen3-shaped hidden={a.hidden} layers={a.layers} heads={a.heads}/{a.kv_heads} head_dim={a.head_dim} "
          f"intermediate={a.intermediate} vocab={a.vocab} tied={not a.untied}; "
          f"{param_bytes(student) / 2**20:.0f} MiB weights each, 3 models")
    print(f"batch: {a.batch} rollouts, {n_tokens} completion tokens, prompt<={a.prompt_len}, context<={a.context_len}, "
          f"completion<={a.completion_len}; 4 model-view pairs (2 teacher configs + base); "
          f"median of {a.repeats} after {a.warmup} warm-up")
    print()
    print(f"| {'what':45} | {'median s':>9} | {'min s':>8} | {'/ bare':>7} |")
    print(f"|{'-' * 47}|{'-' * 11}|{'-' * 10}|{'-' * 9}|")
    for name, v in times.items():
        print(f"| {name:45} | {med[name]:9.3f} | {min(v):8.3f} | {med[name] / bare_t:7.3f} |")
    print()
    decoders, strict_t = med["decoder only (4x completion_hidden)"], med["strict: decoder + head on scored tokens"]
    for (c, e), t in scored.items():
        print(f"(informational) {e} chunk_size={c}: scoring / strict baseline = {t / strict_t:.3f}; "
              f"heads + signals + top-k after the decoders = {t - decoders:.3f} s; first call {first[label(c, e)]:.1f} s")
    for (c, e), t in scored.items():
        ratio = t / bare_t
        name = "" if e == "reference" else f"{e} "
        print(f"RESULT {name}chunk_size={c} scoring/bare = {ratio:.3f}  target <= {a.target:.2f}  "
              f"{'PASS' if ratio <= a.target else 'FAIL'}")
    for e in engines:
        if e != "reference" and "reference" in engines:
            for c in chunks:
                print(f"(informational) chunk_size={c}: {e} / reference scoring time = "
                      f"{scored[(c, e)] / scored[(c, 'reference')]:.3f}")
    for e in failed:
        print(f"RESULT {e} scoring/bare: not measured ({failed[e]})  target <= {a.target:.2f}  FAIL")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

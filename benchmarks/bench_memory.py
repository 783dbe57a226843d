"""Peak memory of chunked scoring vs a naive full-sequence log-softmax implementation.

Setting (issue 3): random-initialised Qwen3-shaped student, teacher and base with Qwen3's
vocabulary (151,936), 8 completions of 512 tokens each (4,096 scored positions), one teacher
config (the external teacher on the student's prompt), base on the student's prompt.

- ``chunked:C`` is production ``score_batch`` with ``chunk_size=C``: all signals plus top-k.
- ``naive`` is written here: one full-logit forward per model, a float32 log-softmax of the whole
  completion ``[N, V]`` kept for student, teacher and base at once, then the same signals computed
  from those three tensors. It walks them in row blocks so its own temporaries stay small: a
  frugal naive, which makes the target harder to meet, not easier.

Each variant runs in a fresh child process. The child builds the models and inputs, runs a tiny
warm-up (lazy allocations), trims the heap, resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``), records RSS, runs the variant once and reads the peak (VmHWM).
``extra`` = peak - RSS before the run (weights and runtime are in the baseline). On CUDA the same is
done with ``torch.cuda.max_memory_allocated``. Target: extra(chunked) <= 10% of extra(naive).

RSS is what the OS charges, allocator slack included. On the shared 2-core test machine repeated
runs of one chunked variant sometimes peaked ~0.4 GiB higher than others (a constant offset, seen
at chunk 64: 0.36-0.39 GiB vs 0.77-0.91 GiB; chunk 256 was stable at 1.35 GiB), so read small
margins on CPU with care; the CUDA number counts tensor bytes only and does not vary.

    python benchmarks/bench_memory.py --chunk-sizes 256,128,64
    python benchmarks/bench_memory.py --device cuda --dtype bfloat16 --hidden 2048 --layers 28 ...
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench_scoring import add_model_args, machine, make_model, param_bytes  # noqa: E402
from reference import pack  # noqa: E402

from opsd_diag.core import signals  # noqa: E402
from opsd_diag.engine.fast import fused_scoring  # noqa: E402
from opsd_diag.engine.scoring import TeacherInput, score_batch  # noqa: E402
from opsd_diag.config.spec import ScoringSpec  # noqa: E402
from opsd_diag.config.settings import ScoreSettings  # noqa: E402

TARGET = 0.10
MiB = 2**20


# ---------------------------------------------------------------- the naive implementation
@torch.no_grad()
def naive_full_logp(model, prompts, completions, temperature: float) -> torch.Tensor:
    """float32 log-softmax over the whole vocabulary for every completion position: [N, V]."""
    device = next(model.parameters()).device
    ids, att, pos, cmask = pack(prompts, completions, 0)
    P = ids.shape[1] - cmask.shape[1]
    logits = model(input_ids=ids.to(device), attention_mask=att.to(device), position_ids=pos.to(device),
                   use_cache=False).logits  # [B, P+C, V]
    z = logits[:, P - 1:-1].float()  # [B, C, V] (a view for float32 models)
    logp = torch.log_softmax(z / temperature if temperature != 1.0 else z, dim=-1)  # [B, C, V]
    del z
    del logits
    cmask = cmask.to(device)
    return logp.flatten(0, 1) if bool(cmask.all()) else logp[cmask]  # [N, V]


@torch.no_grad()
def naive_score(student, teacher, base, prompts, completions, s: ScoreSettings, block: int = 256) -> dict:
    """Every docs/signals.md column and top-k from three materialised [N, V] log-prob tensors."""
    student_logp = naive_full_logp(student, prompts, completions, s.temperature)  # [N, V]
    teacher_logp = naive_full_logp(teacher, prompts, completions, s.temperature)  # [N, V]
    base_logp = naive_full_logp(base, prompts, completions, s.temperature)  # [N, V]
    ids = torch.tensor([t for c in completions for t in c], device=student_logp.device)  # [N]
    out: dict[str, list] = {}
    for lo in range(0, ids.shape[0], block):
        sl = slice(lo, lo + block)
        sp, tp, bp, y = student_logp[sl], teacher_logp[sl], base_logp[sl], ids[sl]
        lp_s, lp_t, lp_b = (signals.token_logprob(x, y) for x in (sp, tp, bp))  # [n] each
        r_opd, r_delta = lp_t - lp_s, lp_t - lp_b
        student = signals.dist(sp, y)
        a_opd = signals.centred_advantage(student, tp - sp, y, centering=s.centering)  # r_opd - E_p[log t - log s]
        a_delta = signals.centred_advantage(student, tp - bp, y, centering=s.centering)
        gate = (a_delta * a_opd > 0).float()
        cols = dict(lp_s=lp_s, lp_t=lp_t, lp_b=lp_b, r_opd=r_opd, r_delta=r_delta, kl_rev=signals.kl(sp, tp),
                    kl_fwd=signals.kl(tp, sp), jsd=signals.generalized_jsd(sp, tp, s.jsd_beta), a_opd=a_opd,
                    a_delta=a_delta, gate=gate, a_d2=gate * a_delta,
                    a_ex=s.exopd_lambda * (lp_t - lp_s) - (lp_s - lp_s), h_s=signals.entropy(sp),
                    h_t=signals.entropy(tp), h_b=signals.entropy(bp),
                    rank_t=(tp > lp_t.unsqueeze(-1)).sum(-1).float(),
                    top1_agree=(sp.argmax(-1) == tp.argmax(-1)).float(),
                    topk_s=signals.topk(sp, s.top_k)[0], topk_t=signals.topk(tp, s.top_k)[0])
        for k, v in cols.items():
            out.setdefault(k, []).append(v.cpu())
    return {k: torch.cat(v) for k, v in out.items()}


# ---------------------------------------------------------------- measuring, in a child process
def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: reset VmHWM to the current RSS
        return True
    except OSError:
        return False


def _trim_heap() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed-but-kept heap would hide part of a peak
    except (OSError, AttributeError):
        pass


def make_inputs(a):
    g = torch.Generator().manual_seed(a.seed)
    prompts = [torch.randint(3, a.vocab, (int(torch.randint(a.prompt_len // 2, a.prompt_len + 1, (1,), generator=g)),),
                             generator=g).tolist() for _ in range(a.rollouts)]
    completions = [torch.randint(3, a.vocab, (a.completion_len,), generator=g).tolist() for _ in range(a.rollouts)]
    return prompts, completions


def child(a) -> dict:
    student, teacher, base = make_model(a, a.seed), make_model(a, a.seed + 1), make_model(a, a.seed + 2)
    prompts, completions = make_inputs(a)

    def run(p, c, chunk):
        s = (ScoringSpec(chunk_size=chunk) if chunk else ScoringSpec()).settings(1.0)  # naive: no chunks
        if a.child == "naive":
            return naive_score(student, teacher, base, p, c, s)
        engine = {"chunked": "reference"}.get(a.child.split(":")[0], a.child.split(":")[0])  # fused, compiled
        return fused_scoring.pick(score_batch, engine)(student, c, p, {"opd": TeacherInput(teacher, p)}, s, 0,
                                                       base=base, base_prompts=p)

    chunk = int(a.child.split(":")[1]) if ":" in a.child else 0
    run(prompts[:1], [completions[0][:4]], max(chunk, 1))  # warm-up: lazy allocations are not the variant's
    cuda = a.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        _trim_heap()
        exact = _reset_peak_rss()
        before = _status_kib("VmRSS") * 1024
    t0 = time.perf_counter()
    result = run(prompts, completions, chunk)
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        how = "torch.cuda.max_memory_allocated"
    else:
        peak = _status_kib("VmHWM") * 1024
        how = "VmHWM after clear_refs" if exact else "VmHWM (process lifetime: reset unavailable, upper bound)"
    seconds = time.perf_counter() - t0
    del result
    return {"variant": a.child, "weights": 3 * param_bytes(student), "before": before, "peak": peak,
            "extra": peak - before, "seconds": seconds, "how": how}


def mem_available() -> int | None:
    try:
        return int(re.search(r"MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text()).group(1)) * 1024
    except (OSError, AttributeError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(p, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=32, intermediate=192, vocab=151936)
    p.set_defaults(threads=0)  # memory, not time: big tensors use both cores well (0: torch's default)
    p.add_argument("--rollouts", type=int, default=8)
    p.add_argument("--completion-len", type=int, default=512)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--chunk-sizes", default="256,128,64", help="comma-separated score_batch chunk sizes")
    p.add_argument("--engines", default="reference",
                   help="scoring engines (reference: chunked:C variants; fused, compiled: opsd_diag.engine.fast.fused_scoring)")
    p.add_argument("--target", type=float, default=TARGET)
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.threads and a.device == "cpu":
        torch.set_num_threads(a.threads)
    if a.child:
        print("CHILD " + json.dumps(child(a)), flush=True)
        return 0

    n = a.rollouts * a.completion_len
    need = 5 * n * a.vocab * 4  # measured naive peak: ~4.9 [N, V] float32 tensors (3 kept + logits + a copy)
    avail = mem_available() if a.device == "cpu" else None
    variants = ["naive"] + [f"{'chunked' if e == 'reference' else e}:{c}" for e in a.engines.split(",") if e
                            for c in a.chunk_sizes.split(",") if c]
    results, failed = {}, []
    args = list(argv if argv is not None else sys.argv[1:])
    for v in variants:
        if v == "naive" and avail is not None and avail < need * 1.1:
            print(f"SKIP naive: needs about {need / 2**30:.1f} GiB, {avail / 2**30:.1f} GiB available; "
                  f"lower --rollouts/--completion-len (the chunked extra hardly depends on N, so the ratio only gets "
                  f"harder) or free memory", flush=True)
            return 2
        proc = subprocess.run([sys.executable, __file__, *args, "--child", v], capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("CHILD ")), None)
        if proc.returncode != 0 or line is None:  # the other variants still run
            print(f"engine: variant {v} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", flush=True)
            failed.append(v)
            continue
        results[v] = json.loads(line[6:])
    if "naive" not in results:
        print("RESULT extra/naive: not measured (the naive variant failed)  target <= %.2f  FAIL" % a.target)
        return 1

    naive = results["naive"]["extra"]
    first = results["naive"]
    print(f"## bench_memory: scoring peak memory vs naive ({a.device}, {a.dtype}, {machine(a.device)})")
    print(f"model: Qwen3-shaped hidden={a.hidden} layers={a.layers} vocab={a.vocab}; student+teacher+base weights "
          f"{first['weights'] / MiB:.0f} MiB; {a.rollouts} x {a.completion_len} = {n} completion tokens; "
          f"one teacher config; measured with {first['how']}, one fresh process per variant")
    print()
    print(f"| {'variant':14} | {'extra MiB':>10} | {'extra / naive':>13} | {'peak MiB':>9} | {'run s':>6} "
          f"| {'<= target':>9} |")
    print(f"|{'-' * 16}|{'-' * 12}|{'-' * 15}|{'-' * 11}|{'-' * 8}|{'-' * 11}|")
    meets = []
    for v, r in results.items():
        frac = r["extra"] / naive
        ok = "" if v == "naive" else ("PASS" if frac <= a.target else "FAIL")
        if ok == "PASS" and v.startswith("chunked:"):
            meets.append(int(v.split(":")[1]))
        print(f"| {v:14} | {r['extra'] / MiB:10.0f} | {frac:13.3f} | {r['peak'] / MiB:9.0f} | {r['seconds']:6.1f} "
              f"| {ok:>9} |")
    print()
    print(f"naive extra = {naive / MiB:.0f} MiB (3 x [N, V] float32 = {3 * n * a.vocab * 4 / MiB:.0f} MiB of it)")
    for v, r in results.items():
        if v != "naive":
            frac = r["extra"] / naive
            engine = "" if v.startswith("chunked:") else v.split(":")[0] + " "
            print(f"RESULT {engine}chunk_size={v.split(':')[1]} extra/naive = {frac:.3f}  target <= {a.target:.2f}  "
                  f"{'PASS' if frac <= a.target else 'FAIL'}")
    for v in failed:
        print(f"RESULT {v} extra/naive: not measured (the variant failed)  target <= {a.target:.2f}  FAIL")
    print(f"chunk sizes meeting the target: {', '.join(map(str, sorted(meets, reverse=True))) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The static-cache sampling engine (opsd_diag.engine.fast.fast_decode) against the reference samplers, on CPU.

On CPU the engine runs its static-cache decode loop eagerly (CUDA graphs are a CUDA-only replay of
the same step): the per-step distributions, the draws, the row drops and the selection switch are
what these tests pin down.
"""

from __future__ import annotations

import pytest
import torch
from fixtures_trainer import one_thread, world  # noqa: F401 (fixtures)
from transformers import AutoModelForCausalLM, AutoTokenizer

from opsd_diag.engine import decode as sampler
from opsd_diag.engine.fast import fast_decode, static_cache
from opsd_diag.engine.sampling import sample_hf, warp
from opsd_diag.config.settings import SamplingSettings


def _models(world):
    tok = AutoTokenizer.from_pretrained(world / "student")
    sdpa = AutoModelForCausalLM.from_pretrained(world / "student").eval()
    eager = AutoModelForCausalLM.from_pretrained(world / "student", attn_implementation="eager").eval()
    assert sdpa.config._attn_implementation == "sdpa"
    return tok, {"sdpa": sdpa, "eager": eager}


def test_each_decode_step_gives_the_unpadded_logits_through_bucket_changes_and_row_drops(world):
    """Teacher-forced: before every token of every row, the engine's logits are that row's logits alone."""
    tok, models = _models(world)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (3, 11, 7, 5, 9)]
    stop = [tok.eos_token_id]
    # rows end at different steps (5 rows: bucket 8, then 4, 2, 1): every row drop and bucket change is crossed
    forced = [torch.randint(3, 250, (int(n),), generator=g).tolist() + stop for n in (3, 11, 1, 8, 5)]
    for name, model in models.items():
        eng = static_cache.engine_for(model)
        before = dict(eng.stats)
        got = fast_decode.forced_step_logits(model, prompts, forced, stop, tok.pad_token_id)
        assert eng.stats["compactions"] - before["compactions"] == 3, eng.stats  # 8 -> 4 -> 2 -> 1 rows
        for p, f, logits in zip(prompts, forced, got):
            assert logits.shape == (len(f), model.config.vocab_size)
            with torch.no_grad():
                for t in range(len(f)):
                    alone = model(input_ids=torch.tensor([p + f[:t]])).logits[0, -1].float()  # [V] no padding
                    torch.testing.assert_close(logits[t], alone, rtol=1e-4, atol=1e-5, msg=f"{name} step {t}")
                    # the distribution sampled: softmax(logits / T) with the nucleus cut, as the reference warps
                    torch.testing.assert_close(warp(logits[t:t + 1], 1.3, 0.8).softmax(-1),
                                               warp(alone[None], 1.3, 0.8).softmax(-1),
                                               rtol=1e-4, atol=1e-6)


def test_draws_equal_the_trainer_sampler_and_a_seeded_run_repeats(world):
    """Same seeding, same distribution, same rows drawing: the same tokens as trainer.sampler, every step."""
    tok, models = _models(world)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (4, 9, 6, 12, 5, 7)]
    frequent = [tok.eos_token_id, 7, 11, 13, 17, 19]  # rows end at different lengths
    rare = [len(tok) - 1]  # rows run to the limit
    for name, model in models.items():
        for top_p, temp, stop, bs in ((1.0, 1.0, frequent, 5), (0.8, 1.3, frequent, 4), (1.0, 1.0, rare, 12)):
            s = SamplingSettings(num_samples=2, temperature=temp, top_p=top_p, max_new_tokens=12, seed=11, batch_size=bs)
            ref = sampler.sample(model, tok, prompts, s, stop)
            got = fast_decode.sample_static(model, tok, prompts, s, stop)
            assert got == ref, (name, top_p, temp)
            assert fast_decode.sample_static(model, tok, prompts, s, stop) == got  # reproducible for a seed
            for c in (c for per in got for c in per):
                assert c.finished == (c.ids[-1] in stop) and not any(t in stop for t in c.ids[:-1])
                assert c.finished or len(c.ids) == s.max_new_tokens
    # and until a row of a batch finishes, they are sample_hf's draws (what trainer.sampler guarantees)
    s = SamplingSettings(num_samples=2, temperature=1.0, top_p=1.0, max_new_tokens=12, seed=11, batch_size=4)
    ref = [c for per in sample_hf(models["sdpa"], tok, prompts, s, frequent) for c in per]
    got = [c for per in fast_decode.sample_static(models["sdpa"], tok, prompts, s, frequent) for c in per]
    for lo in range(0, len(ref), s.batch_size):
        first_end = min(len(c.ids) for c in ref[lo:lo + s.batch_size])
        assert [c.ids[:first_end] for c in got[lo:lo + s.batch_size]] == \
            [c.ids[:first_end] for c in ref[lo:lo + s.batch_size]]


def test_buffers_are_reused_across_calls_and_rebuilt_when_the_weights_move(world):
    tok, models = _models(world)
    model = models["sdpa"]
    s = SamplingSettings(num_samples=1, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=0, batch_size=4)
    prompts = [[5, 6, 7], [8, 9]]
    fast_decode.sample_static(model, tok, prompts, s, [tok.eos_token_id])
    eng = static_cache.engine_for(model)
    ptr = eng.k[0].data_ptr()
    fast_decode.sample_static(model, tok, [[11, 12, 13, 14]], s, [tok.eos_token_id])  # same buckets
    assert static_cache.engine_for(model) is eng and eng.k[0].data_ptr() == ptr
    model.float()  # a no-op move keeps the engine; replacing the weights does not
    assert static_cache.engine_for(model) is eng
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    assert static_cache.engine_for(model) is not eng


def test_the_default_engine_is_todays_path_and_the_switch_is_checked(world):
    from opsd_diag.config.spec import SamplingSpec

    assert SamplingSpec().engine == "hf"  # the config's default is today's path
    assert fast_decode.pick(sample_hf, "hf") is sample_hf and fast_decode.pick(sampler.sample, "hf") is sampler.sample
    picked = fast_decode.pick(sample_hf, "static")
    assert picked.func is fast_decode.sample_static and picked.keywords["fallback"] is sample_hf
    with pytest.raises(ValueError, match="sampling engine"):
        fast_decode.pick(sample_hf, "vllm-ish")


def test_a_model_the_engine_cannot_run_goes_to_the_reference(world, monkeypatch):
    tok, models = _models(world)
    model = models["sdpa"]
    assert fast_decode.unsupported_reason(model) is None
    monkeypatch.setattr(model.config, "_attn_implementation", "flex_attention")
    assert "attention implementation" in fast_decode.unsupported_reason(model)
    calls = []

    def reference(*args):
        calls.append(args)
        return "reference"

    assert fast_decode.pick(reference, "static")(model, tok, [[5, 6]], SamplingSettings(num_samples=1, temperature=1.0, top_p=1.0, max_new_tokens=3, seed=0, batch_size=1),
                                                 [tok.eos_token_id]) == "reference"
    assert len(calls) == 1


# ------------------------------------------------------------------ the GPU-path defects, pinned on CPU

def _tiny(attn="sdpa", kv_heads=1, seed=0):
    """A float32 Qwen3 with 4 query heads per KV head (kv_heads=1) whose parameters require grad."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, head_dim=16, intermediate_size=128, tie_word_embeddings=True,
                      max_position_embeddings=1024, pad_token_id=0, eos_token_id=2, attn_implementation=attn)
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).eval()


TOK = type("Tok", (), {"pad_token_id": 0})()
PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [17]]


def _settings(**kw):
    return SamplingSettings(**{"num_samples": 2, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 10, "seed": 3,
                               "batch_size": 8, **kw})


@pytest.mark.parametrize("name", ["decode", "static", "hf"])
def test_samplers_build_no_autograd_graph(name):
    """Every forward of every sampler runs under inference mode, even when the weights require grad."""
    model = _tiny()
    assert all(p.requires_grad for p in model.parameters()) and torch.is_grad_enabled()
    seen = []
    model.register_forward_hook(lambda m, args, out: seen.append(
        (torch.is_inference_mode_enabled(), out.logits.requires_grad, out.logits.grad_fn)))
    fn = {"decode": sampler.sample, "static": fast_decode.sample_static, "hf": sample_hf}[name]
    fn(model, TOK, PROMPTS, _settings(), [2])
    assert seen and all(s == (True, False, None) for s in seen), seen[:3]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_folded_decode_attention_equals_hfs_attention_with_grouped_heads(attn, monkeypatch):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.qwen3.modeling_qwen3 import eager_attention_forward

    from opsd_diag.engine.fast import fold_attention

    model = _tiny(attn)
    module = model.model.layers[0].self_attn
    assert module.num_key_value_groups == 4
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 4, 1, 16, generator=g), torch.randn(3, 1, 9, 16, generator=g), torch.randn(3, 1, 9, 16,
                                                                                                        generator=g)
    keep = torch.rand(3, 1, 1, 9, generator=g) > 0.3
    keep[..., -1] = True  # every row attends its own slot
    if attn == "sdpa":
        ref, _ = sdpa_attention_forward(module, q, k, v, keep, scaling=module.scaling)
        got, _ = fold_attention.sdpa_folded(module, q, k, v, keep, scaling=module.scaling)
    else:
        add = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
        ref, _ = eager_attention_forward(module, q, k, v, add, scaling=module.scaling)
        got, _ = fold_attention.eager_folded(module, q, k, v, add, scaling=module.scaling)
    assert got.shape == ref.shape == (3, 1, 4, 16)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    # and the engine's teacher-forced logits through the folded steps equal each row's own forward
    forced = [[20, 21, 2], [22, 23, 24, 25], [26], [27, 28]]
    folds = []
    fold = fold_attention.fold_queries
    monkeypatch.setattr(fold_attention, "fold_queries", lambda q, n: folds.append(q.shape) or fold(q, n))
    got = fast_decode.forced_step_logits(model, PROMPTS, forced, [2], 0)
    assert len(folds) == 3 * model.config.num_hidden_layers  # every decode step of every layer ran folded
    with torch.no_grad():
        for p, f, logits in zip(PROMPTS, forced, got):
            for t in range(len(f)):
                alone = model(input_ids=torch.tensor([p + f[:t]])).logits[0, -1]
                torch.testing.assert_close(logits[t], alone, rtol=1e-4, atol=1e-5)
    assert model.config._attn_implementation == attn  # restored after the steps


def test_the_sync_free_draw_is_torch_multinomial():
    g = torch.Generator().manual_seed(1)
    for n, V in ((1, 5), (4, 300), (7, 4096)):
        probs = torch.rand(n, V, generator=g).pow(4).softmax(-1)
        torch.manual_seed(n)
        want = torch.multinomial(probs, 1).squeeze(1)
        torch.manual_seed(n)
        assert torch.equal(fast_decode.draw(probs), want)


SYNCS = {"_local_scalar_dense", "item", "nonzero", "is_nonzero", "equal", "allclose"}


def test_one_host_sync_per_decode_step():
    """Counted at the dispatcher: every op that makes the host wait for the device's result."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Probe(TorchDispatchMode):
        syncs = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in SYNCS:
                Probe.syncs += 1
            return func(*args, **(kwargs or {}))

    model = _tiny()
    eng = static_cache.engine_for(model)
    logps = torch.zeros((7, 24))  # the drawn ids' log-probs are recorded without a sync too
    chooser = fast_decode.multinomial_chooser(1.0, 1.0, logps)
    steps = []

    def choose(scores, rows, t):
        steps.append(t)
        return chooser(scores, rows, t)

    prompts = [[5 + i, 6, 7] for i in range(7)]
    torch.manual_seed(0)
    with torch.inference_mode(), Probe():
        tokens = eng.generate(prompts, 24, list(range(2, 40)), 0, choose)  # frequent stops: rows end, buckets shrink
    assert eng.stats["compactions"] >= 1 and len(steps) > 3
    assert Probe.syncs <= len(steps), (Probe.syncs, len(steps))
    assert (tokens >= 0).all() and (logps[:, 0] < 0).all()


def test_the_engine_cache_does_not_keep_a_model_alive():
    import gc
    import weakref

    model = _tiny()
    fast_decode.sample_static(model, TOK, PROMPTS, _settings(), [2])
    assert model in static_cache._ENGINES
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None and len([m for m in static_cache._ENGINES.keys() if m is None]) == 0


def test_key_length_buckets_are_geometric_and_buffers_shrink_when_unused():
    b = static_cache.bucket
    assert [b(n) for n in (1, 256, 257, 384, 385, 513, 1000, 8192)] == [256, 256, 384, 384, 512, 768, 1024, 8192]
    assert len({b(n) for n in range(1, 8193)}) == 11  # vs 32 multiples of 256
    model = _tiny()
    eng = static_cache.engine_for(model)
    eng.reserve(8, 768, 0)
    assert (eng.rows_cap, eng.len_cap) == (8, 768)
    for _ in range(static_cache.SHRINK_AFTER - 1):
        eng.reserve(2, 256, 0)
        assert (eng.rows_cap, eng.len_cap) == (8, 768)  # not yet: a bigger call may come back
    eng.reserve(4, 384, 0)
    assert (eng.rows_cap, eng.len_cap) == (4, 384) and eng.mask.shape == (4, 1, 1, 384)
    for _ in range(2 * static_cache.SHRINK_AFTER):
        eng.reserve(4, 256, 0)  # more than half of both used: no shrink, no dropped graphs
    assert (eng.rows_cap, eng.len_cap) == (4, 384)
    eng.reserve(16, 256, 0)  # growth is at once, keeping the other dimension
    assert (eng.rows_cap, eng.len_cap) == (16, 384)
    # and sampling through shrunk buffers still draws what the reference loop draws
    s = _settings(max_new_tokens=6)
    assert fast_decode.sample_static(model, TOK, PROMPTS, s, [2]) == sampler.sample(model, TOK, PROMPTS, s, [2])
    assert eng.k[0].shape[2] == eng.len_cap


def test_autocast_weight_copies_are_refreshed_in_place_after_an_optimizer_step(monkeypatch):
    """A float32 student under bf16 autocast: the engine samples with bf16 copies of its Linear weights, which
    equal the new weights cast after a step, at the same addresses, and change no logit and no draw."""
    model = _tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    s = _settings()
    forced = [[20, 21, 2], [22, 23, 24, 25], [26], [27, 28]]

    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fast_decode.sample_static(model, TOK, PROMPTS, s, [2]), \
                fast_decode.forced_step_logits(model, PROMPTS, forced, [2], 0)

    def uncast():  # the same engine with the model's own weights (autocast casts them at every call)
        with monkeypatch.context() as m:
            m.setattr(static_cache._Engine, "sampling_weights", lambda self: None)
            return run()

    def check_copies(eng):
        linear = {f"{n}.weight": mod.weight for n, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)}
        assert set(eng.cast) == set(linear)
        for name, w in linear.items():
            assert eng.cast[name].dtype == torch.bfloat16 and torch.equal(eng.cast[name], w.detach().bfloat16()), name

    for _ in range(2):  # before and after an optimizer step
        draws, logits = run()
        eng = static_cache.engine_for(model)
        check_copies(eng)
        assert eng.k[0].dtype == eng.v[0].dtype == torch.bfloat16  # the KV buffers in the autocast dtype
        ptrs = {n: t.data_ptr() for n, t in eng.cast.items()}
        ref_draws, ref_logits = uncast()
        assert draws == ref_draws
        for a, b in zip(logits, ref_logits):
            assert torch.equal(a, b)
        loss = model(input_ids=torch.tensor([[5, 6, 7, 8]]), labels=torch.tensor([[5, 6, 7, 8]])).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert static_cache.engine_for(model) is eng and eng.stats["weight_refreshes"] > 0
    assert {n: t.data_ptr() for n, t in eng.cast.items()} == ptrs  # refreshed in place: graphs stay valid
    # a bf16 model under autocast has nothing to cast: it runs with its own weights, and no call drops the graphs
    model.to(torch.bfloat16)
    eng = static_cache.engine_for(model)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert eng.sampling_weights() is None
        eng.graphs[("sentinel",)] = None
        assert eng.sampling_weights() is None and eng.sampling_weights() is None
    assert ("sentinel",) in eng.graphs

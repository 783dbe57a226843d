"""The static-cache sampling engine (opsd_diag.engine.fast_decode) against the reference samplers, on CPU.

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
from opsd_diag.engine import fast_decode, static_cache
from opsd_diag.engine.sampling import sample_hf, warp
from opsd_diag.settings import SamplingSettings


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
    from opsd_diag.io.config import SamplingSpec

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

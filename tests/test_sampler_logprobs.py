"""Every sampler returns each drawn id's log-probability under the distribution it was drawn from (temperature and
nucleus cut applied): checked against a slow float64 reference that reruns the model on the prompt and the ids
before each token, without a cache, and warps with an explicit loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fixtures_trainer import one_thread, world  # noqa: F401 (fixtures)
from transformers import AutoModelForCausalLM, AutoTokenizer

from opsd_diag.config.settings import SamplingSettings
from opsd_diag.engine import decode
from opsd_diag.engine.fast import fast_decode
from opsd_diag.engine.sampling import Completion, cut_at_strings, sample_hf

SAMPLERS = {"generate": sample_hf, "decode_loop": decode.sample,
            "static": lambda *a: fast_decode.sample_static(*a)}


def reference_logprob(model, prompt: list[int], before: list[int], token: int, temperature: float,
                      top_p: float) -> float:
    """log p(token) after ``prompt + before``: logits in float64 over the whole vocabulary, divided by the
    temperature, then HF's nucleus cut written out (ascending order, drop while the cumulative mass is at most
    1 - top_p, never the most probable token)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + before])).logits[0, -1].double().numpy() / temperature
    p = np.exp(logits - logits.max())
    p /= p.sum()
    keep = np.ones(len(p), bool)
    if top_p < 1.0:
        order = np.argsort(p, kind="stable")  # ascending
        cum = 0.0
        for i in order[:-1]:
            cum += p[i]
            if cum <= 1 - top_p:
                keep[i] = False
    if not keep[token]:
        return -math.inf
    z = np.log(np.sum(np.exp(logits[keep] - logits.max()))) + logits.max()
    return float(logits[token] - z)


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_each_sampler_returns_the_log_prob_of_every_drawn_id(world, name, temperature, top_p):
    tok = AutoTokenizer.from_pretrained(world / "student")
    model = AutoModelForCausalLM.from_pretrained(world / "student").eval()
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (4, 9, 6)]
    stop = [tok.eos_token_id, 7, 11, 13]  # rows end at different lengths
    s = SamplingSettings(num_samples=2, temperature=temperature, top_p=top_p, max_new_tokens=12, seed=3,
                         batch_size=4)
    out = SAMPLERS[name](model, tok, prompts, s, stop)
    checked = 0
    for p, per in zip(prompts, out):
        for c in per:
            assert c.logprobs is not None and len(c.logprobs) == len(c.ids), name
            for t, (tid, lp) in enumerate(zip(c.ids, c.logprobs)):
                want = reference_logprob(model, p, c.ids[:t], tid, temperature, top_p)
                assert math.isfinite(lp) and lp <= 0.0
                assert lp == pytest.approx(want, abs=2e-4), (name, t)
                checked += 1
    assert checked >= 20


def test_log_probs_do_not_make_equal_draws_unequal_and_are_cut_with_the_ids(world):
    """Completions compare by ids and finished only (samplers drawing the same ids round their log-probs apart);
    a stop-string cut keeps the log-probs of the ids it keeps."""
    assert Completion([1, 2], True, (-0.1, -0.2)) == Completion([1, 2], True, (-0.1000001, -0.2))
    tok = AutoTokenizer.from_pretrained(world / "student")
    ids = tok("Answer: 7\n\nQuestion: what is 2 + 3?", add_special_tokens=False)["input_ids"]
    c = Completion(ids, False, tuple(-0.01 * (i + 1) for i in range(len(ids))))
    cut = cut_at_strings(tok, c, ["\n\nQuestion:"])
    assert cut.finished and 0 < len(cut.ids) < len(ids)
    assert cut.logprobs == c.logprobs[:len(cut.ids)]

"""One sampling interface per role (opsd_diag.engine.samplers): which sampler the diagnosis, the trainer's rollouts
and its evaluation draw with, and that a training run's evaluation draws exactly what its rollouts' sampler draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fixtures_trainer import one_thread, world  # noqa: F401 (fixtures)
from transformers import AutoModelForCausalLM, AutoTokenizer

from opsd_diag.config.spec import EvalSpec
from opsd_diag.engine import decode, samplers
from opsd_diag.engine.fast import fast_decode
from opsd_diag.engine.sampling import sample_hf
from opsd_diag.io.thinking import check

ROOT = Path(__file__).resolve().parents[1]


def test_each_role_has_one_reference_and_the_static_engine_falls_back_to_it():
    assert samplers.for_role("diagnosis") is sample_hf  # the golden diagnosis runs were drawn with HF generate
    assert samplers.for_role("rollouts", "hf") is decode.sample
    assert samplers.for_role("evaluation", "hf") is samplers.for_role("rollouts", "hf")  # one run, one sampler
    for role, reference in (("diagnosis", sample_hf), ("rollouts", decode.sample), ("evaluation", decode.sample)):
        picked = samplers.for_role(role, "static")
        assert picked.func is fast_decode.sample_static and picked.keywords["fallback"] is reference
    with pytest.raises(ValueError, match="sampling role"):
        samplers.for_role("scoring")
    with pytest.raises(ValueError, match="sampling engine"):
        samplers.for_role("evaluation", "vllm")


def test_evaluation_draws_what_the_rollouts_sampler_draws_for_each_chunk_seed(world):
    """trainer.evaluate's samples, chunk by chunk, are engine.decode's for the chunk's seed (and not HF generate's,
    which differ once a row of a batch ends), and its counts are the answers checked one by one."""
    from trainer.evaluate import _chunks, _sample_and_check
    from trainer.rollouts import ProblemSet, micro_seed

    tok = AutoTokenizer.from_pretrained(world / "student")
    model = AutoModelForCausalLM.from_pretrained(world / "student").eval()
    lines = (ROOT / "sample_data" / "problems" / "test.jsonl").read_text().splitlines()[:5]
    problems = [json.loads(line) for line in lines]
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (4, 9, 6, 12, 5)]
    ps = ProblemSet(problems, prompts, None, None, None)
    stop = [tok.eos_token_id, 7, 11, 13, 17, 19]  # rows end at different lengths
    ev = EvalSpec(num_samples=2, pass_k=[1, 2], temperature=1.0, max_completion_length=12, batch_size=4, seed=5)
    results, samples = _sample_and_check(model, tok, ps, ev, "toy", stop, 1, 0, 0, "hf")

    want_results, want_samples, differs = [], [], False
    for c, idx in _chunks(len(problems), 2, 1, 0):  # batch 4 rows / 2 samples: 2 problems per chunk
        s = ev.settings(micro_seed(ev.seed, 0, c))
        outs = decode.sample(model, tok, [prompts[i] for i in idx], s, stop)
        differs |= outs != sample_hf(model, tok, [prompts[i] for i in idx], s, stop)
        for i, per in zip(idx, outs):
            n_correct = 0
            for o in per:
                n_correct += int(bool(check(tok, prompts[i], o.ids, o.finished, problems[i]["answer"], "toy",
                                            "incorrect").correct))
                want_samples.append((prompts[i], o.ids))
            want_results.append((i, len(per), n_correct))
    assert differs  # the inputs tell the two samplers apart
    assert results == want_results and samples == want_samples

"""The vLLM backend's contract (opsd_diag.engine.sampling.sample_vllm), with a stand-in vllm module.

vLLM cannot run on these machines; what is checked is what the project controls: prompts go in as
token ids (never text), the sampling parameters are complete and fixed (no generation_config: top_k
off, the stop ids, the seed, stop tokens kept in the output), and completions come back trimmed at
the first stop id with the finished flag, per prompt, in order.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

from opsd_diag.engine import sampling as rollout
from opsd_diag.engine.sampling import Completion
from opsd_diag.config.settings import SamplingSettings


def _fake_vllm(seen: dict):
    mod = types.ModuleType("vllm")
    inputs = types.ModuleType("vllm.inputs")

    class SamplingParams:
        def __init__(self, **kw):
            seen["params"] = kw

    def TokensPrompt(prompt_token_ids):  # noqa: N802 (vLLM's name)
        return {"prompt_token_ids": prompt_token_ids}

    @dataclass
    class Out:
        token_ids: list

    class LLM:
        def __init__(self, **kw):
            seen["engine"] = kw

        def generate(self, prompts, params, use_tqdm=False):
            seen["prompts"] = prompts
            n = seen["params"]["n"]
            return [types.SimpleNamespace(outputs=[Out(p["prompt_token_ids"][-1:] + [7, 2, 9][:k + 1] + [5])
                                                   for k in range(n)]) for p in prompts]

    mod.LLM, mod.SamplingParams, inputs.TokensPrompt = LLM, SamplingParams, TokensPrompt
    mod.inputs = inputs
    return {"vllm": mod, "vllm.inputs": inputs}


def test_sample_vllm_passes_ids_and_fixed_settings_and_trims(monkeypatch):
    seen: dict = {}
    for name, mod in _fake_vllm(seen).items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(rollout, "_ENGINES", {})
    s = SamplingSettings(num_samples=3, temperature=0.7, top_p=0.9, max_new_tokens=16, seed=5, batch_size=4)
    out = rollout.sample_vllm("some/model", [[11, 12], [13]], s, [2], dtype="bfloat16")
    assert seen["engine"] == {"model": "some/model", "revision": None, "dtype": "bfloat16", "trust_remote_code": False}
    assert [p["prompt_token_ids"] for p in seen["prompts"]] == [[11, 12], [13]]
    assert seen["params"] == {"n": 3, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "max_tokens": 16, "seed": 5,
                              "stop_token_ids": [2], "skip_special_tokens": False,
                              "include_stop_str_in_output": True}
    assert out == [[Completion([12, 7, 5], False), Completion([12, 7, 2], True), Completion([12, 7, 2], True)],
                   [Completion([13, 7, 5], False), Completion([13, 7, 2], True), Completion([13, 7, 2], True)]]


def test_sample_vllm_gets_revision_and_memory_share(monkeypatch):
    """sampling.vllm_gpu_memory_utilization and the model's revision reach the engine (issue 21); the
    real engine is not run here (no GPU, no vLLM)."""
    seen: dict = {}
    for name, mod in _fake_vllm(seen).items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(rollout, "_ENGINES", {})
    s = SamplingSettings(num_samples=1, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0, batch_size=4)
    rollout.sample_vllm("org/m", [[11]], s, [2], revision="abc123", gpu_memory_utilization=0.45)
    assert seen["engine"] == {"model": "org/m", "revision": "abc123", "dtype": "auto", "trust_remote_code": False,
                              "gpu_memory_utilization": 0.45}
    engines = dict(rollout._ENGINES)
    rollout.sample_vllm("org/m", [[12]], s, [2], revision="abc123", gpu_memory_utilization=0.45)
    assert rollout._ENGINES == engines  # one engine shared by every view of one model

"""On-policy sampling: token ids in, token ids out (scoring never sees text).

The HF backend runs batched ``generate`` with left padding and an explicit, complete set of
sampling settings, so a checkpoint's generation_config (top_k=20, repetition penalty, ...) can
never silently change the sampling distribution away from softmax(logits / temperature).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessorList

from opsd_diag.engine.decoder_kind import cache_kwarg, layer_types  # noqa: F401 (the samplers' import)
from opsd_diag.errors import NonFiniteLogits, OpsdError
from opsd_diag.config.settings import SamplingSettings


@dataclass(frozen=True)
class Completion:
    ids: list[int]      # sampled ids, up to and including the first stop id
    finished: bool      # False: cut at max_completion_length
    # the sampler's log-probability of each id under the distribution it was drawn from (temperature and nucleus
    # applied); None where the sampler gives none. Not compared: samplers drawing the same ids may round them apart
    logprobs: tuple[float, ...] | None = field(default=None, compare=False)


def trim_completion(ids: list[int], stop_ids: list[int]) -> tuple[list[int], bool]:
    """Cut generated ids after the first stop id (kept); returns (ids, finished)."""
    for i, t in enumerate(ids):
        if t in stop_ids:
            return list(ids[:i + 1]), True
    return list(ids), False


def completion(ids: list[int], stop_ids: list[int], logprobs: list[float] | None = None) -> Completion:
    """A sampled row cut after its first stop id, with its log-probs cut alike."""
    kept, finished = trim_completion(ids, stop_ids)
    return Completion(kept, finished, None if logprobs is None else tuple(logprobs[:len(kept)]))


def sampled_logprobs(probs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[n] log-probability of ``ids`` [n] under ``probs`` [n, V], the distribution the sampler drew them from (the
    probabilities it already computed for the draw: no second pass over the vocabulary)."""
    return probs.gather(1, ids[:, None]).squeeze(1).log()


def cut_at_strings(tok, c: Completion, strings) -> Completion:
    """Cut a completion after the first token that completes one of ``strings`` (a Base model's stop text,
    e.g. ``"\n\nQuestion:"``); the token is kept, as a stop id is. Bisects on decoded prefixes."""
    def hit(n: int) -> bool:
        text = tok.decode(c.ids[:n], skip_special_tokens=False)
        return any(s in text for s in strings)

    if not strings or not hit(len(c.ids)):
        return c
    lo, hi = 0, len(c.ids)  # hit(hi) holds, hit(lo) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if hit(mid) else (mid, hi)
    return Completion(list(c.ids[:hi]), True, None if c.logprobs is None else c.logprobs[:hi])


def warp(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """[b, V] float32 scores: temperature, then HF's nucleus cut (the top token always stays)."""
    scores = logits / temperature if temperature != 1.0 else logits
    if top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - top_p)
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))
    return scores


def check_finite(scores: torch.Tensor, position: int) -> None:
    """NonFiniteLogits when a row's next-token scores hold NaN or +inf (what softmax cannot sample from).

    -inf is allowed: the nucleus cut writes it, and a row keeps at least its top token.
    """
    bad = torch.isnan(scores).any(-1) | torch.isposinf(scores).any(-1)  # [b]
    if bool(bad.any()):
        raise NonFiniteLogits(int(bad.nonzero()[0, 0]), position)


class _CheckAndRecord:
    """A logits processor for ``generate`` that checks the scores (returned unchanged) and records the sampled
    ids' log-probs: ``generate`` applies its temperature and nucleus warpers after every processor it is given,
    so this one warps a copy as they do (``warp``) and reads, at each call, the id drawn at the call before."""

    def __init__(self, prompt_width: int, rows: int | None, s: SamplingSettings):
        self.width, self.rows, self.s = prompt_width, rows, s
        self.logps: list[torch.Tensor] = []  # [b] per sampled position
        self.last: torch.Tensor | None = None  # [b, V] log-softmax of the latest warped scores

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.rows is not None:  # an LM head padded beyond the tokenizer: never sample a padding row
            scores = scores.clone()
            scores[:, self.rows:] = float("-inf")
        check_finite(scores, input_ids.shape[1] - self.width)
        self.read(input_ids[:, -1])
        self.last = warp(scores.float(), self.s.temperature, self.s.top_p).log_softmax(dim=-1)
        return scores

    def read(self, drawn: torch.Tensor) -> None:
        if self.last is not None:  # the id drawn from ``last``
            self.logps.append(self.last.gather(1, drawn[:, None]).squeeze(1))

    def per_row(self, sequences: torch.Tensor) -> list[list[float]]:
        """Each row's log-probs, the last drawn id (after the last call) read from the sequences."""
        self.read(sequences[:, -1])
        return torch.stack(self.logps, dim=1).tolist() if self.logps else [[] for _ in range(len(sequences))]


@torch.inference_mode()
def sample_hf(model, tok, prompts: list[list[int]], s: SamplingSettings, stop_ids: list[int]) -> list[list[Completion]]:
    """``s.num_samples`` completions per prompt; deterministic for a given seed and prompt list."""
    device = next(model.parameters()).device
    out: list[Completion] = []
    for batch in seeded_batches(prompts, s):  # generate draws from the global RNG, reseeded per batch
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id, dtype=torch.long)  # [b, P]
        att = torch.zeros_like(ids)  # [b, P]
        for i, p in enumerate(batch):
            ids[i, width - len(p):] = torch.tensor(p)
            att[i, width - len(p):] = 1
        recorder = _CheckAndRecord(width, getattr(model, "opsd_scored_rows", None), s)
        gen_ids = model.generate(
            input_ids=ids.to(device), attention_mask=att.to(device), do_sample=True,
            temperature=s.temperature, top_p=s.top_p, top_k=0, min_p=None, typical_p=1.0,
            repetition_penalty=1.0, no_repeat_ngram_size=0, max_new_tokens=s.max_new_tokens,
            eos_token_id=stop_ids, pad_token_id=tok.pad_token_id, num_beams=1,
            logits_processor=LogitsProcessorList([recorder]))
        logps = recorder.per_row(gen_ids)
        out += [completion(row, stop_ids, lp) for row, lp in zip(gen_ids[:, width:].tolist(), logps)]
    return per_prompt(out, len(prompts), s)


def seeded_batches(prompts: list[list[int]], s: SamplingSettings):
    """Every prompt ``s.num_samples`` times, in batches of ``s.batch_size``; before each batch the global RNG is
    reseeded from a generator seeded with ``s.seed``, so every sampler (this one, ``engine.decode``, the static
    engine) draws the same stream for the same batch whatever ran before."""
    rows = [p for p in prompts for _ in range(s.num_samples)]
    gen = torch.Generator(device="cpu").manual_seed(s.seed)
    for start in range(0, len(rows), s.batch_size):
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
        yield rows[start:start + s.batch_size]


def per_prompt(out: list[Completion], n_prompts: int, s: SamplingSettings) -> list[list[Completion]]:
    """The flat completions of ``seeded_batches``' rows regrouped: ``s.num_samples`` per prompt."""
    return [out[i * s.num_samples:(i + 1) * s.num_samples] for i in range(n_prompts)]


def sample_vllm(model_name: str, prompts: list[list[int]], s: SamplingSettings, stop_ids: list[int],
                dtype: str = "auto", trust_remote_code: bool = False, revision: str | None = None,
                gpu_memory_utilization: float | None = None) -> list[list[Completion]]:
    """The same contract on vLLM (GPU machines); prompts are given as token ids, never text. One engine
    per (model, revision, dtype, remote code, memory share): views of one model share it."""
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError:
        raise OpsdError("sampling.backend is 'vllm' but vLLM is not installed: pip install 'opsd-diag[vllm]' "
                        "or use backend: hf") from None
    llm = _vllm_engine((model_name, revision, dtype, trust_remote_code, gpu_memory_utilization), LLM)
    params = SamplingParams(n=s.num_samples, temperature=s.temperature, top_p=s.top_p, top_k=-1,
                            max_tokens=s.max_new_tokens, seed=s.seed, stop_token_ids=stop_ids,
                            skip_special_tokens=False, include_stop_str_in_output=True)
    results = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [[Completion(*trim_completion(list(o.token_ids), stop_ids)) for o in r.outputs] for r in results]


_ENGINES: dict = {}


def _vllm_engine(key: tuple, llm_cls):
    if key not in _ENGINES:
        name, revision, dtype, trust_remote_code, memory = key
        extra = {} if memory is None else {"gpu_memory_utilization": memory}
        _ENGINES[key] = llm_cls(model=name, revision=revision, dtype=dtype, trust_remote_code=trust_remote_code,
                                **extra)
    return _ENGINES[key]

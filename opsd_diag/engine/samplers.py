"""Which sampler draws each role's tokens: one interface for the diagnosis, the trainer's rollouts and its evaluation.

Every sampler is ``(model, tok, prompts, settings, stop_ids) -> [[Completion]]``: ``settings.num_samples``
completions per prompt, each up to and including its first stop id, every token drawn from
softmax(float32 logits / temperature) with HF's nucleus cut and nothing from a checkpoint's
generation_config, the global RNG reseeded per generation batch from the call's seed. The samplers differ in
how the logits are computed and which rows stay in a batch, so they draw the same distribution and the same
tokens until the first row of a batch finishes; after that the random stream differs.

- ``generate`` (``engine.sampling.sample_hf``): HF ``generate``, every row kept until the longest ends. The
  diagnosis' reference (its rollouts, teacher samples and the predictor's continuations): the golden runs
  were drawn with it.
- ``decode_loop`` (``engine.decode.sample``): our loop that drops a row as soon as it ends. The reference of
  a training run, for its rollouts and for its evaluation alike, so one run samples one way.
- ``static`` (``engine.fast.fast_decode``, ``sampling.engine: static``): the opt-in GPU engine, for every
  role; a model it cannot run goes to the role's reference.

``sampling.backend: vllm`` (the diagnosis only: a separate engine loaded by model name, never the live
weights of a training run) is ``engine.sampling.sample_vllm``, called by ``engine.diagnose.sample``.

Each of the three returns every drawn id's log-probability under the distribution it was drawn from
(``Completion.logprobs``: temperature and nucleus cut applied), which a training step's
``token_mask.rollouts: surprising`` ranks rollouts by; vLLM's completions carry none (its V1 engine reports
log-probs before temperature unless asked otherwise, and no training step samples with it).
"""

from __future__ import annotations

from opsd_diag.engine import decode
from opsd_diag.engine.fast import fast_decode
from opsd_diag.engine.sampling import sample_hf

REFERENCE = {"generate": sample_hf, "decode_loop": decode.sample}
ROLES = {"diagnosis": "generate", "rollouts": "decode_loop", "evaluation": "decode_loop"}


def for_role(role: str, engine: str = "hf"):
    """The sampler of ``role`` (``ROLES``) under the config's ``sampling.engine``: ``hf`` (the default) the
    role's reference sampler, ``static`` the static-cache engine, which hands a model it cannot run to it."""
    if role not in ROLES:
        raise ValueError(f"sampling role must be one of {', '.join(ROLES)}, got {role!r}")
    return fast_decode.pick(REFERENCE[ROLES[role]], engine)

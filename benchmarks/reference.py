"""The reference batch layout the benchmarks (and tests) measure against: one left-padded batch.

Not used by the library, which scores right-padded, length-grouped rows (``engine.scoring.
completion_hidden``); this is the obvious layout that path must equal and beat.
"""

from __future__ import annotations

import torch


def pack(prompts: list[list[int]], completions: list[list[int]], pad_id: int):
    """Left-padded prompts, right-padded completions, explicit masks and positions.

    Returns input_ids, attention_mask, position_ids [B, P+C] and completion_mask [B, C]; the logits
    predicting completion token j sit at column P + j - 1.
    """
    P = max(len(p) for p in prompts)
    C = max(1, max(len(c) for c in completions))
    B = len(prompts)
    input_ids = torch.full((B, P + C), pad_id, dtype=torch.long)  # [B, P+C]
    attention = torch.zeros((B, P + C), dtype=torch.long)  # [B, P+C]
    completion_mask = torch.zeros((B, C), dtype=torch.bool)  # [B, C]
    for i, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[i, P - len(p):P] = torch.tensor(p)
        input_ids[i, P:P + len(c)] = torch.tensor(c, dtype=torch.long)
        attention[i, P - len(p):P + len(c)] = 1
        completion_mask[i, :len(c)] = True
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, P+C] explicit with left padding
    return input_ids, attention, position_ids, completion_mask

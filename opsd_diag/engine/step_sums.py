"""What a training step adds up over its tokens (``StepSums``) and the names its statistics are logged under.

Kept apart from the step (``engine.train_step``) so the step's module holds the computation and this one the
bookkeeping the trainer all-reduces and logs (``trainer.loop``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

# per-token statistic -> its name in metrics.jsonl (means over the step's generated tokens; with a token
# mask over its kept ones, except ``kept`` itself, counted over every token)
STAT_NAMES = {"r_opd": "r_opd", "k1": "kl_k1", "k3": "kl_k3", "h_s": "entropy_student", "h_t": "entropy_teacher",
              "gate": "gate_fraction", "clipped": "clipped_ratio", "nll": "nll",
              "uld": "uld", "left_out": "left_out_ratio",  # these two: a teacher with another tokenizer
              "kept": "kept_ratio", "correct": "rollout_accuracy"}  # training.token_mask; rollouts' outcomes


@dataclass
class StepSums:
    """Raw sums over tokens (divided by counts only after the all-reduce).

    Sums stay 0-d device tensors until the step ends, so a GPU never waits on a per-chunk ``.item()``.
    """
    loss: Tensor | float = 0.0
    tokens: int = 0
    rows: int = 0
    finished: int = 0
    stats: dict[str, Tensor] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    nonfinite: list = field(default_factory=list)  # (micro-batch, chunk positions, {role: [n] bool}) per chunk

    def add_stats(self, stats: dict[str, Tensor]) -> None:
        for k, v in stats.items():
            if k in STAT_NAMES:
                self.stats[k] = self.stats.get(k, 0.0) + v.detach().double().sum()
                self.counts[k] = self.counts.get(k, 0) + v.numel()

    def note(self, mb, positions: Tensor | int, stats: dict) -> None:
        """Keep a chunk's non-finite flags (device tensors: read only when the step's loss is not finite) with its
        micro-batch ``mb`` (``engine.train_step.MicroBatch``, not imported: that module imports this one);
        ``positions``: the chunk's flat positions in ``mb`` ``[n]``, or its first one when they are contiguous."""
        self.nonfinite.append((mb, positions, stats["nonfinite"]))

    def first_nonfinite(self) -> tuple[str, object, int, int] | None:
        """(role, micro-batch, row, completion position) of the first position whose logits were NaN or inf."""
        for mb, positions, flags in self.nonfinite:
            for role, bad in flags.items():
                hit = bad.nonzero()
                if hit.numel():
                    i = int(hit[0, 0])
                    flat = positions + i if isinstance(positions, int) else int(positions[i])
                    for row, c in enumerate(mb.completions):
                        if flat < len(c):
                            return role, mb, row, flat
                        flat -= len(c)
        return None

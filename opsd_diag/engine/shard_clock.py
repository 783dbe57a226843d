"""The main process' rollout and scoring seconds per shard, in status.json: the two phases of a shard and their ETA."""

from __future__ import annotations

import time
from pathlib import Path

from opsd_diag import jobs


class ShardClock:
    """The main process' rollout and scoring seconds per shard, in status.json, so progress can show the two
    sub-steps of a shard as phases with their own ETA (other processes' shards count once written)."""

    def __init__(self, out_dir: Path, processes: int):
        self.out_dir, self.t, self.step = out_dir, time.time(), None
        self.sums = {"rollouts_s": 0.0, "rollouts_n": 0, "scoring_s": 0.0, "scoring_n": 0}
        jobs.write_status(out_dir, processes=processes, **self.sums)

    def lap(self, step: str | None, **fields) -> None:
        """The previous step ended now; ``step`` (rollouts | scoring | None between shards) begins."""
        now = time.time()
        if self.step is not None:
            self.sums[f"{self.step}_s"] += now - self.t
            self.sums[f"{self.step}_n"] += 1
        self.t, self.step = now, step
        jobs.write_status(self.out_dir, shard_step=step, **self.sums, **fields)

"""The main process' rollout and scoring seconds per shard, in status.json: the two phases of a shard and their ETA."""

from __future__ import annotations

import time


class ShardClock:
    """The main process' rollout and scoring seconds per shard, in status.json, so progress can show the two
    sub-steps of a shard as phases with their own ETA (other processes' shards count once written).

    ``write(**fields)`` updates the run's status.json (``jobs.write_status`` on the run directory), passed in
    so this module stays below the job protocol in the import graph."""

    def __init__(self, write, processes: int):
        self.write, self.t, self.step = write, time.time(), None
        self.sums = {"rollouts_s": 0.0, "rollouts_n": 0, "scoring_s": 0.0, "scoring_n": 0}
        write(processes=processes, **self.sums)

    def lap(self, step: str | None, **fields) -> None:
        """The previous step ended now; ``step`` (rollouts | scoring | None between shards) begins."""
        now = time.time()
        if self.step is not None:
            self.sums[f"{self.step}_s"] += now - self.t
            self.sums[f"{self.step}_n"] += 1
        self.t, self.step = now, step
        self.write(shard_step=step, **self.sums, **fields)

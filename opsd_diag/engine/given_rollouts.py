"""A diagnosis of rollouts read from a file (config ``rollouts``) instead of sampled.

``attach`` reads and matches the file (``io.rollouts_file``) once the student's views exist, and cuts the
prepared run to the problems the file holds; a shard then takes its completions from here, every row keeps
the sampler's log-probs (``sampler_logprobs``, which sampled rows carry too) and how its prompt relates to the view
(``sampler_prompt``); ``mismatch`` sets those log-probs beside the student's own scoring (``lp_s``) for
summary.json's ``sampler_mismatch`` block (``core.sampler_mismatch``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from opsd_diag.core import sampler_mismatch
from opsd_diag.engine.sampling import Completion
from opsd_diag.engine.train_step import logprobs_of
from opsd_diag.io import rollouts_file


@dataclass(frozen=True)
class GivenCompletion(Completion):
    """A completion from the file (its ``logprobs``: the file's, None where it has none)."""
    prompt: str = "view"  # io.rollouts_file.Matched.prompt


def attach(prep):
    """``prep`` (an ``engine.diagnose.Prepared``) with the file's rollouts, cut to the problems they answer;
    unchanged without a ``rollouts`` section."""
    cfg = prep.cfg
    if cfg.rollouts is None:
        return prep
    s = cfg.sampling
    per = rollouts_file.match(rollouts_file.parse(cfg.rollouts), prep.problems, prep.student_prompts, prep.tok,
                              num_samples=s.num_samples, max_length=s.max_completion_length,
                              temperature=s.temperature, stop_ids=prep.stop_ids, vocab=len(prep.tok))
    keep = [i for i, m in enumerate(per) if m]

    def cut(values: list) -> list:
        return [values[i] for i in keep]

    for c in prep.cross.values():  # a base next to a teacher with another tokenizer has its own prompts
        if c.base_prompts is not None:
            c.base_prompts = cut(c.base_prompts)
    given = [[GivenCompletion(m.ids, m.finished, None if m.logprobs is None else tuple(m.logprobs), m.prompt)
              for m in per[i]] for i in keep]
    return dataclasses.replace(prep, problems=cut(prep.problems), student_prompts=cut(prep.student_prompts),
                               teacher_prompts={n: cut(v) for n, v in prep.teacher_prompts.items()},
                               truncated={n: cut(v) for n, v in prep.truncated.items()},
                               base_prompts={n: cut(v) for n, v in prep.base_prompts.items()}, given=given)


def completions(prep, idx: list[int]) -> list[list[GivenCompletion]]:
    """The file's completions of the problems ``idx`` (what sampling would have returned)."""
    return [prep.given[i] for i in idx]


def columns(c: Completion) -> dict:
    """The rollouts-table columns of the sampler's side: its log-probs of the ids (``sampler_logprobs``; None where
    the sampler or the file gives none) and, for a completion from a file, how its prompt relates to the view."""
    out = {"sampler_logprobs": None if c.logprobs is None else list(c.logprobs)}
    return {**out, "sampler_prompt": c.prompt} if isinstance(c, GivenCompletion) else out


def mismatch(prep, tables: dict[str, pd.DataFrame]) -> dict | None:
    """summary.json's ``sampler_mismatch`` block, or None for a sampled run. The student's log-probs are read from
    the first teacher config of the student's tokenizer (``lp_s`` is the same under every one of them)."""
    if prep.given is None:
        return None
    rollouts, tokens = tables["rollouts"], tables["tokens"]
    temps = {"sampling_temperature": prep.cfg.sampling.temperature, "scoring_temperature": prep.cfg.scoring_temperature}
    if "sampler_logprobs" not in rollouts or rollouts["sampler_logprobs"].isna().all():
        return {"status": "the rollouts file holds no log-probs", **temps}
    config = next((t.name for t in prep.cfg.teachers if t.name not in prep.cross), None)
    if config is None:
        return {"status": "every teacher config has another tokenizer: no student log-probs per sampled id", **temps}
    lp = tokens[tokens["config"] == config].sort_values(["rollout_id", "pos"]).groupby("rollout_id")["lp_s"]
    student, sampler = [], []
    for rid, lps in zip(rollouts["rollout_id"], logprobs_of(rollouts)):
        if lps is None:
            continue
        student.append(lp.get_group(rid).to_numpy(dtype=np.float64))
        sampler.append(np.asarray(lps, dtype=np.float64))
    return {"status": "ok", **temps, **sampler_mismatch.summarize(student, sampler)}

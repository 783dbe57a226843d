"""Bring your own rollouts (issue 34, item 2): a diagnosis of a rollouts file written in another tool's format,
equal to the diagnosis that sampled those rollouts itself, and the engine-vs-trainer check on the file's log-probs
(fires on perturbed log-probs, silent on matching ones), its numbers against a float64 loop reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ZOO, tiny_config

from opsd_diag.config.rollouts_file import RolloutsFileSpec
from opsd_diag.core import sampler_mismatch
from opsd_diag.io import rollouts_file


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# -------------------------------------------------------------------------------------------- parsing

def test_each_format_is_read_into_our_fields(tmp_path):
    vllm = {"prompt": "q", "prompt_token_ids": [1, 2], "outputs": [
        {"text": "a", "token_ids": [5, 6], "logprobs": [{"5": {"logprob": -0.5, "rank": 1}}, {"6": -0.25}],
         "finish_reason": "stop"},
        {"text": "b", "token_ids": [7], "logprobs": [-1.0], "finish_reason": "length"}]}
    slime = {"prompt": [{"role": "user", "content": "q"}], "tokens": [1, 2, 8, 9], "response_length": 2,
             "response": "cd", "rollout_log_probs": [-0.1, -0.2], "status": "truncated"}
    verl = {"input": "user q", "output": "the text", "score": 1.0, "step": 3}
    ours = {"problem_id": 7, "completion_ids": [3], "logprobs": [-2.0], "finished": True, "temperature": 0.7}
    for row, fmt in ((vllm, "vllm"), (slime, "slime"), (verl, "verl"), (ours, "opsd")):
        assert rollouts_file.detect(row) == fmt
    recs = rollouts_file.parse(RolloutsFileSpec(path=str(_write(tmp_path / "v.jsonl", [vllm]))))
    assert [(r.prompt_ids, r.completion_ids, r.logprobs, r.finished) for r in recs] == [
        ([1, 2], [5, 6], [-0.5, -0.25], True), ([1, 2], [7], [-1.0], False)]
    (r,) = rollouts_file.parse(RolloutsFileSpec(path=str(_write(tmp_path / "s.jsonl", [slime]))))
    assert (r.prompt_ids, r.completion_ids, r.logprobs, r.finished, r.completion) == ([1, 2], [8, 9], [-0.1, -0.2],
                                                                                      False, "cd")
    (r,) = rollouts_file.parse(RolloutsFileSpec(path=str(_write(tmp_path / "r.jsonl", [verl]))))
    assert (r.prompt, r.completion, r.completion_ids, r.logprobs) == ("user q", "the text", None, None)
    (r,) = rollouts_file.parse(RolloutsFileSpec(path=str(_write(tmp_path / "o.jsonl", [
        {"uid": "p1", "response_ids": [4, 5]}])), fields={"problem_id": "uid", "completion_ids": "response_ids"}))
    assert (r.problem_id, r.completion_ids) == ("p1", [4, 5])


# ----------------------------------------------------------------------------------- mismatch maths

def _mismatch_reference(student, sampler):
    """Explicit float64 loops: overall and per bucket, as docs/design.md#rollouts-from-a-file states."""
    rows = []
    for s, q in zip(student, sampler):
        for pos in range(len(s)):
            rows.append((pos, float(s[pos]) - float(q[pos])))
    def stats(ds):
        return {"n_tokens": len(ds), "mean": sum(ds) / len(ds), "mean_abs": sum(abs(d) for d in ds) / len(ds),
                "max_abs": max(abs(d) for d in ds), "share_over": sum(abs(d) > 0.1 for d in ds) / len(ds)}
    out = stats([d for _, d in rows])
    edges = [0, 16, 64, 256, 1024, 10 ** 9]
    out["buckets"] = [stats(ds) for lo, hi in zip(edges, edges[1:])
                      if (ds := [d for p, d in rows if lo <= p < hi])]
    seq = []
    for s, q in zip(student, sampler):
        total = 0.0
        for a, b in zip(s, q):
            total += float(a) - float(b)
        seq.append(abs(total))
    out["sequence_mean_abs"] = sum(seq) / len(seq)
    return out


@pytest.mark.parametrize("scale", [0.0, 1e-4, 0.3])
def test_mismatch_statistics_against_a_loop_reference(scale):
    rng = np.random.default_rng(int(scale * 1e4))
    student = [-rng.exponential(1.0, rng.integers(1, 90)).astype(np.float32) for _ in range(9)]
    sampler = [np.minimum(s + scale * rng.standard_normal(s.size), 0) for s in student]
    got, ref = sampler_mismatch.summarize(student, sampler), _mismatch_reference(student, sampler)
    for k in ("n_tokens", "mean", "mean_abs", "max_abs", "share_over", "sequence_mean_abs"):
        assert got[k] == pytest.approx(ref[k], rel=1e-12, abs=1e-15), k
    assert len(got["buckets"]) == len(ref["buckets"])
    for g, r in zip(got["buckets"], ref["buckets"]):
        for k in r:
            assert g[k] == pytest.approx(r[k], rel=1e-12, abs=1e-15), k
    assert got["fired"] == (scale == 0.3)


# ------------------------------------------------------------------------------------------ end to end

@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """A sampled diagnosis of the bundled tiny models: the rollouts a vLLM or OpenRLHF dump would hold."""
    from opsd_diag.config.spec import from_dict
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.run import Run
    from opsd_diag.zoo import task

    root = tmp_path_factory.mktemp("byo")
    data = _write(root / "problems.jsonl", task.generate(5, 3))
    cfg = tiny_config(ZOO, data, sampling={"num_samples": 2, "max_completion_length": 24})
    run_diagnosis(from_dict(cfg), root / "sampled", show_progress=False)
    return cfg, Run.load(root / "sampled")


def _vllm_dump(run, path: Path, noise: float = 0.0, seed: int = 0) -> Path:
    """The sampled run written as vLLM RequestOutputs (one line per request, the student's log-probs as vLLM's
    per-position {id: {logprob, rank, decoded_token}}), with ``noise`` added to the log-probs."""
    rng = np.random.default_rng(seed)
    t = run.tokens[run.tokens["config"] == run.configs[0]]
    lines = []
    for _, g in run.rollouts.sort_values("rollout_id").groupby("problem_index"):
        outs = []
        for r in g.itertuples():
            lp = t[t["rollout_id"] == r.rollout_id].sort_values("pos")["lp_s"].to_numpy(np.float64)
            lp = np.minimum(lp + noise * rng.standard_normal(lp.size), 0.0)
            outs.append({"index": r.sample_idx, "text": r.text, "token_ids": [int(x) for x in r.completion_ids],
                         "cumulative_logprob": float(lp.sum()),
                         "logprobs": [{str(int(i)): {"logprob": float(v), "rank": 1, "decoded_token": None}}
                                      for i, v in zip(r.completion_ids, lp)],
                         "finish_reason": "stop" if r.finished else "length"})
        lines.append({"request_id": str(g["problem_index"].iloc[0]), "prompt": None,
                      "prompt_token_ids": [int(x) for x in g["prompt_ids.student"].iloc[0]], "outputs": outs})
    return _write(path, lines)


def _diagnose(cfg: dict, file: Path, out: Path):
    import yaml

    from opsd_diag import cli
    from opsd_diag.run import Run

    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli.main(["run", str(path), "--out", str(out), "--quiet", "--rollouts", str(file)]) == 0
    return Run.load(out)


def test_a_vllm_dump_is_diagnosed_as_the_run_that_sampled_it(sampled, tmp_path):
    cfg, run = sampled
    given = _diagnose(cfg, _vllm_dump(run, tmp_path / "vllm.jsonl"), tmp_path / "given")
    assert given.config.rollouts is not None and given.config.rollouts.path.endswith("vllm.jsonl")
    cols = ["rollout_id", "config", "pos", "token_id", "lp_s", "lp_t", "r_opd", "kl_rev", "jsd"]
    a, b = (x.tokens.sort_values(["config", "rollout_id", "pos"])[cols].reset_index(drop=True) for x in (run, given))
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-6, atol=1e-6)
    assert given.rollouts["correct"].tolist() == run.rollouts["correct"].tolist()
    assert (given.rollouts["sampler_prompt"] == "view").all()
    m = given.summary.sampler_mismatch
    assert m["status"] == "ok" and not m["fired"] and m["mean_abs"] < 1e-5
    check = next(c for c in given.failure_checks() if c.name == "sampler log-probs")
    assert not check.fired


def test_perturbed_log_probs_fire_the_check_with_the_reference_numbers(sampled, tmp_path):
    cfg, run = sampled
    file = _vllm_dump(run, tmp_path / "noisy.jsonl", noise=0.5, seed=1)
    given = _diagnose(cfg, file, tmp_path / "noisy")
    m = given.summary.sampler_mismatch
    check = next(c for c in given.failure_checks() if c.name == "sampler log-probs")
    assert m["fired"] and check.fired and f"mean |d| {m['mean_abs']:.4f} nats" in check.line
    # the reference: the file's own numbers against the stored lp_s, in explicit loops
    t = given.tokens[given.tokens["config"] == given.configs[0]]
    student, sampler = [], []
    k = cfg["sampling"]["num_samples"]
    for i, line in enumerate(file.read_text().splitlines()):  # one line per problem, in the data's order
        for j, o in enumerate(json.loads(line)["outputs"]):
            rid = i * k + j
            assert list(given.rollouts.set_index("rollout_id").loc[rid, "completion_ids"]) == o["token_ids"]
            student.append(t[t["rollout_id"] == rid].sort_values("pos")["lp_s"].to_numpy(np.float64))
            sampler.append([next(iter(d.values()))["logprob"] for d in o["logprobs"]])
    ref = _mismatch_reference(student, sampler)
    for k in ("n_tokens", "mean", "mean_abs", "max_abs", "share_over", "sequence_mean_abs"):
        assert m[k] == pytest.approx(ref[k], rel=1e-9), k
    frame = given.sampler_mismatch()
    assert frame["positions"].iloc[0] == "all" and frame["mean_abs"].iloc[0] == pytest.approx(ref["mean_abs"])
    assert [b["n_tokens"] for b in m["buckets"]] == [b["n_tokens"] for b in ref["buckets"]]


def test_an_openrlhf_text_dump_is_matched_by_its_rendered_prompt(sampled, tmp_path):
    """OpenRLHF / verl write text only: the prompt as the rendered chat text (special tokens skipped), the output
    text. The rollouts are matched to their problems and the text encoded with the student's tokenizer."""
    from opsd_diag.io.models import load_tokenizer

    cfg, run = sampled
    tok = load_tokenizer(cfg["student"]["model"], None, False, False)
    rows = [{"input": tok.decode(list(r["prompt_ids.student"]), skip_special_tokens=True), "output": r["text"]}
            for _, r in run.rollouts.sort_values("rollout_id").iterrows()]
    file = _write(tmp_path / "openrlhf.jsonl", rows[::-1])  # another order than the data's
    # a random model's ids need not be its tokenizer's encoding of their text: the text may take more ids
    longer = {**cfg, "sampling": {**cfg["sampling"], "max_completion_length": 64}}
    given = _diagnose(longer, file, tmp_path / "text")
    got = given.rollouts.sort_values("rollout_id")
    assert got["problem_id"].tolist() == run.rollouts.sort_values("rollout_id")["problem_id"].tolist()
    expected = sorted(tuple(tok.encode(r["output"], add_special_tokens=False)) for r in rows)
    assert sorted(tuple(x) for x in got["completion_ids"]) == expected
    assert given.summary.sampler_mismatch["status"] == "the rollouts file holds no log-probs"
    assert not any(c.name == "sampler log-probs" and c.fired for c in given.failure_checks())


def test_a_subset_of_the_problems_is_diagnosed_alone(sampled, tmp_path):
    cfg, run = sampled
    full = _vllm_dump(run, tmp_path / "all.jsonl").read_text().splitlines()
    given = _diagnose(cfg, _write(tmp_path / "two.jsonl", full[1:3]), tmp_path / "two")
    assert given.facts()["n_problems"] == 2
    assert sorted(given.rollouts["problem_id"].unique()) == sorted(
        run.rollouts[run.rollouts["problem_index"].isin([1, 2])]["problem_id"].unique())

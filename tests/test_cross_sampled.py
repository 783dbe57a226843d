"""A cross-tokenizer diagnosis between two tiny RANDOM models sampled at a high temperature keeps its rows
(issue 34, item 4): a Llama-3-style student against a Qwen3-style teacher built from the bundled zoo's config
and tokenizer. Before sampled spans every rollout was left out (no random sample is its tokenizer's own
encoding of its text) and the config refused; now only the tokens that do not round-trip at the byte level
are dropped. Every kept row is checked against float64 full forwards (tests/test_cross_diagnose.py)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch
from conftest import ZOO, write_jsonl
from fixtures_crosstok import EOT, corpus, teacher_tokenizer
from test_align_sampled import ref_bytes, ref_keep
from test_cross_diagnose import check_rows
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from opsd_diag.config.spec import from_dict
from opsd_diag.engine.diagnose import run_diagnosis
from opsd_diag.io.retokenize import Retokenized, retokenize, special_ids
from opsd_diag.zoo import task

pytestmark = pytest.mark.slow  # runs models end to end


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("random-pair")
    tok = teacher_tokenizer(corpus(), vocab_size=2000)  # Llama-3's special tokens, BOS and chat template
    torch.manual_seed(0)
    eot = tok.convert_tokens_to_ids(EOT)
    student = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                           max_position_embeddings=1024, bos_token_id=tok.bos_token_id,
                                           eos_token_id=[eot], pad_token_id=tok.pad_token_id))
    student.generation_config.eos_token_id, student.generation_config.pad_token_id = [eot], tok.pad_token_id
    student.save_pretrained(root / "student")
    tok.save_pretrained(root / "student")
    torch.manual_seed(1)  # the bundled teacher's Qwen3 config and tokenizer, random weights
    teacher = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ZOO / "teacher"))
    teacher.save_pretrained(root / "teacher")
    AutoTokenizer.from_pretrained(ZOO / "teacher").save_pretrained(root / "teacher")
    shutil.copy(ZOO / "teacher" / "generation_config.json", root / "teacher" / "generation_config.json")
    return root, write_jsonl(root / "p.jsonl", task.generate(4, 11))


def old_rule_keeps(comp: list[int], tok, stop: list[int]) -> bool:
    """The rule before sampled spans: no special token, and the ids are the re-encoding of their decoded text."""
    body = comp[:-1] if comp and comp[-1] in stop else comp
    if set(body) & special_ids(tok):
        return False
    return tok(tok.decode(body), add_special_tokens=False)["input_ids"] == body


def test_random_models_with_different_tokenizers_keep_their_rows(pair, tmp_path):
    root, data = pair
    cfg = {"student": {"model": str(root / "student")},
           "teachers": [{"name": "xt", "model": str(root / "teacher"), "context": "full_solution"}],
           "data": {"path": str(data)},
           "sampling": {"num_samples": 8, "max_completion_length": 24, "teacher_samples": 1, "temperature": 2.0},
           "scoring": {"batch_size": 5, "chunk_size": 16}, "analysis": {"bootstrap": 10, "checker": "toy"},
           "shard_size": 2}
    out = tmp_path / "run"
    run_diagnosis(from_dict(cfg), out, show_progress=False)  # before: "none of the 32 rollouts could be aligned"
    tokens, rollouts = pd.read_parquet(out / "tokens.parquet"), pd.read_parquet(out / "rollouts.parquet")
    s_tok, t_tok = AutoTokenizer.from_pretrained(root / "student"), AutoTokenizer.from_pretrained(root / "teacher")
    stop = json.loads((out / "manifest.json").read_text())["stop_ids"]
    specials = special_ids(s_tok)
    kept = odd = old_kept = cut = 0
    for _, r in rollouts.iterrows():
        comp = [int(t) for t in r["completion_ids"]]
        old_kept += old_rule_keeps(comp, s_tok, stop)
        body = comp[:-1] if comp and comp[-1] in stop else comp
        # the reference: cut before the first special token, then keep the most tokens whose bytes are UTF-8
        first = next((k for k, t in enumerate(body) if t in specials), len(body))
        n = ref_keep(ref_bytes(s_tok, body[:first]))
        if n == 0:
            assert r["left_out.xt"] != "", comp
            continue
        al = retokenize(comp, s_tok, t_tok, stop, t_tok.eos_token_id)
        assert isinstance(al, Retokenized) and r["left_out.xt"] == "", (comp, al)
        whole = n == len(body)
        assert al.n_student == n + (whole and len(comp) > len(body)) and bool(al.cut) == (not whole)
        assert r["cut.xt"] == al.cut  # why the row was cut short, in rollouts.parquet
        cut += not whole
        rows = tokens[(tokens.config == "xt") & (tokens.rollout_id == r["rollout_id"])]
        assert rows.span_len.sum() == al.n_student
        kept += 1
        odd += s_tok(s_tok.decode(body[:n]), add_special_tokens=False)["input_ids"] != body[:n]
    assert kept >= len(rollouts) // 3 and odd >= 3 and old_kept < kept
    summary = json.loads((out / "summary.json").read_text())
    assert summary["left_out"]["xt"]["rollouts"] == len(rollouts) - kept
    assert summary["left_out"]["xt"]["cut"]["rollouts"] == cut == sum(summary["left_out"]["xt"]["cut"]["reasons"].values())
    assert check_rows(tokens, rollouts, "xt", root / "student", root / "teacher", None, None, "student",
                      tau=2.0, stop=stop) >= 3 * kept  # scored at the sampling temperature

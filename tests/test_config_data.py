import json

import pandas as pd
import pytest
from conftest import REPO, tiny_config, write_jsonl

from opsd_diag.errors import OpsdError
from opsd_diag.config.spec import DataSpec, from_dict, load_config, to_yaml
from opsd_diag.io.data import load_problems


def test_quickstart_config_loads_and_round_trips(tmp_path):
    cfg = load_config(REPO / "sample_data/configs/quickstart.yaml")
    assert {t.name for t in cfg.teachers} >= {"teacher", "self_full_solution"}
    p = tmp_path / "c.yaml"
    p.write_text(to_yaml(cfg))
    assert load_config(p) == cfg
    assert cfg.scoring_temperature == cfg.sampling.temperature  # default: score at the sampling temperature


@pytest.mark.parametrize("patch, match", [
    ({"sampling": {"num_sampels": 2}}, r"sampling\.num_sampels: unknown key"),
    ({"bogus": 1}, r"bogus: unknown key"),
    ({"sampling": {"temperature": 0}}, r"sampling\.temperature"),
    ({"scoring": {"centering": "top5"}}, r"scoring\.centering: use 'full' or 'topk=N'"),
    ({"teachers": [{"name": "x", "context": "Solution: {solution}"}]}, r"teachers\.0\.context.*no \{prompt\}"),
    ({"teachers": [{"name": "x", "context": "{prompt} {prompt.__class__}"}]}, r"not allowed"),
    ({"teachers": [{"name": "a"}, {"name": "a"}]}, r"unique"),
    ({"teachers": []}, r"teachers"),
    ({"base": None, "scoring": {"exopd_reference": "base"}}, r"no base model"),
    ({"ideal": {"budget": 0}}, r"ideal\.budget"),
    ({"analysis": {"entropy_edges": [1.0, 0.5]}}, r"strictly increasing"),
])
def test_bad_config_values_name_the_key(tmp_path, patch, match):
    with pytest.raises(OpsdError, match=match):
        from_dict(tiny_config(tmp_path, tmp_path / "d.jsonl", **patch))


def test_bad_config_files(tmp_path):
    with pytest.raises(OpsdError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("student: [unclosed")
    with pytest.raises(OpsdError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(OpsdError, match="YAML mapping"):
        load_config(tmp_path / "list.yaml")


ROWS = [{"id": "a", "prompt": "q1", "solution": "s1", "answer": "1"},
        {"id": "b", "prompt": "q2", "answer": 2}]


def test_jsonl_csv_parquet_agree(tmp_path):
    write_jsonl(tmp_path / "p.jsonl", ROWS)
    pd.DataFrame(ROWS).to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame(ROWS).astype({"answer": str}).to_parquet(tmp_path / "p.parquet")
    loaded = [load_problems(DataSpec(path=str(tmp_path / f"p.{ext}"))) for ext in ("jsonl", "csv", "parquet")]
    for probs in loaded:
        assert [(p["id"], p["prompt"], p["solution"], p["answer"]) for p in probs] == \
            [("a", "q1", "s1", "1"), ("b", "q2", None, "2")]



def test_the_app_s_raw_preview_reads_every_format_alike(tmp_path):
    """The New run page's preview of a data file as stored (``app.workbench.raw_rows``): the same first records from
    JSONL, CSV and Parquet (Parquet through ``store.parquet_table``), and one clear error for a corrupt file."""
    from app.workbench import raw_rows

    write_jsonl(tmp_path / "p.jsonl", ROWS)
    pd.DataFrame(ROWS).astype({"answer": str}).to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame(ROWS).astype({"answer": str}).to_parquet(tmp_path / "p.parquet")
    frames = [raw_rows(tmp_path / f"p.{ext}", n=1) for ext in ("jsonl", "csv", "parquet")]
    for f in frames:
        assert list(f["id"]) == ["a"] and list(f["prompt"]) == ["q1"] and [str(x) for x in f["answer"]] == ["1"]
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(OpsdError, match=r"cannot read .*bad\.parquet"):
        raw_rows(tmp_path / "bad.parquet")


def test_field_mapping_chat_prompts_and_limit(tmp_path):
    rows = [{"question": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"q{i}"}],
             "gold": str(i)} for i in range(5)]
    write_jsonl(tmp_path / "m.jsonl", rows)
    probs = load_problems(DataSpec(path=str(tmp_path / "m.jsonl"), fields={"prompt": "question", "answer": "gold"},
                                   limit=3))
    assert len(probs) == 3 and probs[2]["answer"] == "2" and probs[0]["prompt"][1]["content"] == "q0"
    assert probs[0]["id"] == "row000001"


@pytest.mark.parametrize("content, fields, match", [
    ('{"prompt": "ok"}\n{"prompt": "broken"\n', {}, r"line 2 is not valid JSON"),
    ("", {}, r"contains no problems"),
    ("\n\n", {}, r"contains no problems"),
    ('{"question": "q"}\n', {}, r"line 1 has no 'prompt' field"),
    ('{"q": "x"}\n', {"prompt": "question"}, r"maps prompt to 'question', but no record .* has a 'question' field"),
    ('{"prompt": "a", "q": "x"}\n{"q": "y"}\n', {}, r"line 2 has no 'prompt' field"),
    ('[1, 2]\n', {}, r"record 1 of its JSON array is not a JSON object"),
    ('["a"\n', {}, r"line 1 is not valid JSON"),
    ('{"prompt": 5}\n', {}, r"line 1: 'prompt' must be a string"),
    ('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n', {}, r"line 2: duplicate id"),
    ('{"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n', {},
     r"last chat message"),
])
def test_bad_data(tmp_path, content, fields, match):
    (tmp_path / "d.jsonl").write_text(content)
    with pytest.raises(OpsdError, match=match):
        load_problems(DataSpec(path=str(tmp_path / "d.jsonl"), fields=fields))


def test_bad_data_files(tmp_path):
    with pytest.raises(OpsdError, match="not found"):
        load_problems(DataSpec(path=str(tmp_path / "nope.jsonl")))
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(OpsdError, match="set data.format"):
        load_problems(DataSpec(path=str(tmp_path / "d.txt")))
    (tmp_path / "d.parquet").write_text("not parquet")
    with pytest.raises(OpsdError, match="cannot read"):
        load_problems(DataSpec(path=str(tmp_path / "d.parquet")))
    pd.DataFrame([{"prompt": "q", "solution": "s"}]).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(OpsdError, match="has no 'question' column \\(columns: prompt, solution\\)"):
        load_problems(DataSpec(path=str(tmp_path / "c.csv"), fields={"prompt": "question"}))


def test_shipped_splits_are_valid_and_disjoint():
    splits = {n: load_problems(DataSpec(path=str(REPO / f"sample_data/problems/{n}.jsonl")))
              for n in ("train", "dev", "test")}
    prompts = {n: {p["prompt"] for p in v} for n, v in splits.items()}
    assert not prompts["test"] & prompts["train"] and not prompts["test"] & prompts["dev"]
    assert not prompts["dev"] & prompts["train"]
    for probs in splits.values():
        assert {p["meta"]["difficulty"] for p in probs} == {1, 2, 3, 4}
        assert all(p["solution"] and p["answer"] is not None for p in probs)
    assert json.loads(json.dumps(splits["test"][0]))["id"]

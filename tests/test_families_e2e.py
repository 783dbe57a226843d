"""One diagnosis and one training step end to end per family set-up (issue 21), on tiny random models with
the real chat templates (tests/families.py): Qwen3 thinking and non-thinking teacher views with a Qwen3-Base,
a Llama-3.1 student with a Llama-3.2 teacher and a template-less Llama-3 Base, Gemma-3 SFT, Gemma-2's
refused system prompt, and a LoRA checkpoint of the trainer diagnosed through ``adapter``.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from conftest import write_jsonl
from families import build

from opsd_diag import cli
from opsd_diag.zoo import task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fam-e2e")
    made = {name: build(fam, root / name, seed=seed, **kw) for name, fam, seed, kw in (
        ("qwen3", "qwen3", 0, {}), ("qwen3_8b", "qwen3", 1, {"extra_rows": 8}), ("qwen3_base", "qwen3_base", 2, {}),
        ("llama31", "llama3_1", 0, {}), ("llama32", "llama3_2", 1, {}), ("llama_base", "llama3_base", 2, {}),
        ("gemma3", "gemma3", 0, {"generation_config": False}), ("gemma2", "gemma2", 0, {}))}
    made["data"] = write_jsonl(root / "problems.jsonl", task.generate(3, 11))
    return made


def _write(tmp_path, cfg: dict):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _base_cfg(world, student, teachers, base=None, **over):
    cfg = {"student": {"model": str(world[student])}, "teachers": teachers, "data": {"path": str(world["data"])},
           "sampling": {"num_samples": 2, "max_completion_length": 6, "teacher_samples": 1},
           "scoring": {"batch_size": 4, "chunk_size": 64}, "analysis": {"bootstrap": 10}, "shard_size": 2}
    if base:
        cfg["base"] = {"model": str(world[base])}
    cfg.update(over)
    return cfg


def test_qwen3_thinking_and_non_thinking_views_with_base(world, tmp_path, capsys):
    teachers = [{"name": "think", "model": str(world["qwen3_8b"]), "context": "answer_only"},
                {"name": "no_think", "model": str(world["qwen3_8b"]), "context": "answer_only",
                 "chat_template_kwargs": {"enable_thinking": False}}]
    cfg = _base_cfg(world, "qwen3", teachers, "qwen3_base")
    out = tmp_path / "run"
    assert cli.main(["run", str(_write(tmp_path, cfg)), "--out", str(out), "--quiet"]) == 0
    man = json.loads((out / "manifest.json").read_text())
    shown = man["rendered_prompts"]
    assert shown["student"].endswith("<|im_start|>assistant\n")
    assert shown["think"].endswith("step by step.<|im_end|>\n<|im_start|>assistant\n")
    assert shown["no_think"] == shown["think"] + "<think>\n\n</think>\n\n"
    assert man["stop_ids"][0] == 2  # <|im_end|>, then <|endoftext|>
    rollouts = pd.read_parquet(out / "rollouts.parquet")
    assert {"truncated", "in_thinking"} <= set(rollouts.columns)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["student_truncated_share"] == pytest.approx(rollouts["truncated"].mean())
    teach = pd.read_parquet(out / "teacher_rollouts.parquet")
    for name in ("think", "no_think"):
        share = teach[teach["config"] == name]["truncated"].mean()
        assert summary["configs"][name]["teacher_truncated_share"] == pytest.approx(share)
    assert (rollouts[rollouts["truncated"]]["correct"] == False).all()  # noqa: E712


def test_llama_pair_with_template_less_base(world, tmp_path, capsys):
    teachers = [{"name": "t32", "model": str(world["llama32"]), "chat_template_kwargs": {"date_string": "01 Jan 2025"}},
                {"name": "self_hint", "context": "hint"}]
    cfg = _base_cfg(world, "llama31", teachers, "llama_base", scoring={"batch_size": 4, "chunk_size": 64,
                                                                       "base_view": "teacher"})
    out, path = tmp_path / "run", _write(tmp_path, cfg)
    assert cli.main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "teacher config 't32'" in err and "different from the student's" in err
    man = json.loads((out / "manifest.json").read_text())
    assert "Today Date: 01 Jan 2025" in man["rendered_prompts"]["t32"]
    # the app's form preview renders each view as the run did: the 3.2 teacher with its own template
    from app import workbench
    from opsd_diag.config.spec import load_config
    from opsd_diag.io.data import load_problems
    from opsd_diag.io.models import load_tokenizer

    c = load_config(path)
    shown = {v.who: v.text for v in workbench.prompt_previews(c, load_problems(c.data)[0], load_tokenizer(
        str(world["llama31"])), {"t32": load_tokenizer(str(world["llama32"]))})}
    assert shown["t32"] == man["rendered_prompts"]["t32"] and shown["student"] == man["rendered_prompts"]["student"]
    assert "Today Date: 26 Jul 2024" in man["rendered_prompts"]["student"]
    assert man["rendered_prompts"]["student"].count("<|begin_of_text|>") == 1
    assert man["stop_ids"][0] == 5  # <|eot_id|>, not <|end_of_text|>
    assert man["template_notes"]


def test_raw_base_student_with_stop_strings(world, tmp_path):
    cfg = _base_cfg(world, "llama_base", [{"name": "self_sol", "context": "full_solution"}])
    cfg["student"].update({"prompt_format": "raw", "stop_strings": ["\n\nQuestion:"]})
    out = tmp_path / "run"
    assert cli.main(["run", str(_write(tmp_path, cfg)), "--out", str(out), "--quiet"]) == 0
    man = json.loads((out / "manifest.json").read_text())
    assert man["rendered_prompts"]["student"].startswith("<|begin_of_text|>")
    assert man["stop_ids"] == [1]


def test_raw_base_student_trains_with_stop_strings(world, tmp_path):
    from trainer import cli as tcli

    cfg = _train_cfg(world, "llama_base", [{"name": "self_sol", "context": "full_solution"}], method="opsd")
    cfg["student"].update({"prompt_format": "raw", "stop_strings": ["\n\nQuestion:"]})
    assert tcli.main([str(_write(tmp_path, cfg)), "--out", str(tmp_path / "raw")]) == 0


def test_gemma2_system_prompt_is_one_line_and_leaves_nothing(world, tmp_path, capsys):
    cfg = _base_cfg(world, "gemma2", [{"name": "self_sol", "context": "full_solution"}])
    cfg["data"]["system_prompt"] = "Be brief."
    out = tmp_path / "run"
    assert cli.main(["run", str(_write(tmp_path, cfg)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "System role not supported" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def _train_cfg(world, student, teachers, base=None, **training):
    cfg = _base_cfg(world, student, teachers, base)
    cfg["training"] = {"max_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 1e-3,
                       "eval": {"data": None}, "report_to": "none", **training}
    return cfg


def test_gemma3_sft_step_and_opd2_step_with_template_less_base(world, tmp_path):
    from trainer import cli as tcli
    from opsd_diag.config import training as tconfig
    from trainer.setup import prepare

    cfg = _train_cfg(world, "gemma3", [{"name": "self_sol", "context": "full_solution"}], method="sft")
    path = _write(tmp_path, cfg)
    setup = prepare(tconfig.load(path), __import__("torch").device("cpu"))
    eot = setup.tok.convert_tokens_to_ids("<end_of_turn>")
    assert setup.stop_ids[0] == eot and all(t[-1] == eot for t in setup.train.targets)  # no generation_config.json
    assert tcli.main([str(path), "--out", str(tmp_path / "sft")]) == 0
    cfg = _train_cfg(world, "llama31", [{"name": "t32", "model": str(world["llama32"])}], "llama_base",
                     method="opd2")
    assert tcli.main([str(_write(tmp_path, cfg)), "--out", str(tmp_path / "opd2")]) == 0
    assert (tmp_path / "opd2" / "metrics.jsonl").read_text().strip()


def test_lora_checkpoint_is_diagnosable_and_trainable_from(world, tmp_path):
    pytest.importorskip("peft", reason="peft is the optional extra opsd-diag[peft]")
    from trainer import cli as tcli

    cfg = _train_cfg(world, "qwen3", [{"name": "self_sol", "context": "full_solution"}], method="opsd",
                     lora={"r": 2, "alpha": 4})
    assert tcli.main([str(_write(tmp_path, cfg)), "--out", str(tmp_path / "lora")]) == 0
    adapters = sorted((tmp_path / "lora" / "checkpoints").glob("*/adapter_config.json"))
    assert adapters, "the LoRA run wrote no adapter"
    adapter = str(adapters[-1].parent)
    diag = _base_cfg(world, "qwen3", [{"name": "self_sol", "context": "full_solution"}])
    diag["student"]["adapter"] = adapter
    out = tmp_path / "diag"
    assert cli.main(["run", str(_write(tmp_path, diag)), "--out", str(out), "--quiet"]) == 0
    # training from it: the adapter merged into the student's weights, then a fresh run
    cfg = _train_cfg(world, "qwen3", [{"name": "self_sol", "context": "full_solution"}], method="opsd")
    cfg["student"]["adapter"] = adapter
    assert tcli.main([str(_write(tmp_path, cfg)), "--out", str(tmp_path / "again")]) == 0

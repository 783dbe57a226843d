"""The recipes of docs/recipes.md: every config in sample_data/configs/recipes/ loads, its training section
resolves, its contexts render on its data, it asks for what its page says, and nothing is downloaded
(models are hub ids read offline: loading one here is a clear error, never a download)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from opsd_diag.errors import OpsdError
from opsd_diag.io import models as hub
from opsd_diag.io import templates
from opsd_diag.config.spec import load_config
from opsd_diag.io.data import load_problems
from opsd_diag.config.model_options import teacher_model_spec, view_template_kwargs

RECIPES = REPO / "sample_data" / "configs" / "recipes"
ALL = sorted(RECIPES.glob("*.yaml"))


def test_there_are_recipes_and_the_page_lists_each():
    page = (REPO / "docs" / "recipes.md").read_text()
    assert len(ALL) == 6
    for path in ALL:
        assert f"sample_data/configs/recipes/{path.name}" in page, path.name


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_recipe_loads_and_checks(path: Path, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = load_config(path)
    problems = load_problems(cfg.data)
    for t in cfg.teachers:
        templates.check_problems(templates.resolve(t.context), problems, t.name, cfg.data.fields, t.partial_fraction)
    if cfg.training is not None:
        from opsd_diag.config.training import resolve_training

        resolve_training(cfg, str(path))
    for spec in [cfg.student, cfg.base, *(teacher_model_spec(cfg.student, t) for t in cfg.teachers if not t.is_self)]:
        if spec is None:
            continue
        assert not spec.allow_download and spec.model.count("/") == 1  # a hub id, read from the local cache only
        with pytest.raises(OpsdError, match="allow_download: true|cannot load"):
            hub.load_tokenizer.__wrapped__(spec.model, spec.revision, False, False)


def _cfg(name):
    return load_config(RECIPES / name)


def test_recipe_contents():
    think = _cfg("qwen3_thinking.yaml")
    assert think.student.chat_template_kwargs == {"enable_thinking": True} and think.base.model.endswith("-Base")
    assert think.scoring.base_view == "teacher" and think.analysis.truncated == "incorrect"
    off = _cfg("qwen3_non_thinking.yaml")
    assert [view_template_kwargs(off.student, t) for t in off.teachers] == [{"enable_thinking": False},
                                                                            {"enable_thinking": True}]
    llama = _cfg("llama3_pair.yaml")
    assert llama.student.chat_template_kwargs["date_string"] == "26 Jul 2024" and llama.training.method == "opd2"
    assert _cfg("gemma3.yaml").student.attn_implementation == "eager"
    assert teacher_model_spec(llama.student, llama.teachers[0]).device_map == "auto"
    fsdp = _cfg("fsdp2_qwen3_8b.yaml")
    assert fsdp.training.gradient_checkpointing
    assert teacher_model_spec(fsdp.student, fsdp.teachers[0]).device_map is None
    vllm = _cfg("vllm_qwen3.yaml")
    assert vllm.sampling.backend == "vllm" and vllm.sampling.vllm_gpu_memory_utilization == 0.45
    assert vllm.student.revision == "main"

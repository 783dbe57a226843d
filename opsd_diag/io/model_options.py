"""Per-model options of real checkpoints: chat-template options, prompt format and how each model loads.

Mixed into ``config.ModelSpec`` (student, base) and ``config.TeacherSpec`` (each teacher view), so
the fields are documented once and merged by one rule: a teacher's option left out (None) is the
student's. The rule for templates is written in ``docs/recipes.md``: every model renders its own
view with its own tokenizer's chat template; a model without one (a ``-Base`` checkpoint) is
shown the student's rendering.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

# A chat-template option is a plain value: templates read flags and strings (enable_thinking, date_string).
TemplateValue = str | int | float | bool | None
DeviceMap = str | dict[str, int | str]


def _device(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v):
        raise ValueError(f"unknown device {v!r}: use auto, cpu, cuda, cuda:N or mps")
    return v


def _attn(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(r"[A-Za-z0-9_\-./]+", v):
        raise ValueError(f"attn_implementation {v!r}: use eager, sdpa, flash_attention_2, ... (letters, digits, _-./)")
    return v


Device = Annotated[str | None, AfterValidator(_device)]
Attn = Annotated[str | None, AfterValidator(_attn)]


class ModelOptions(BaseModel):
    """Fields shared by the student's and the base's model sections (``ModelSpec``)."""
    device: Device = Field(None, description="this model's device (default: the top-level `device`)")
    device_map: DeviceMap | None = Field(
        None, description="transformers `device_map` (`auto`, `balanced`, or {module: device}): split a large "
                          "model over GPUs; the model is then not moved to `device`")
    attn_implementation: Attn = Field(None, description="`eager`, `sdpa`, `flash_attention_2`, ... (default: "
                                                        "transformers' choice)")
    adapter: str | None = Field(None, description="a LoRA adapter directory (e.g. a checkpoint `opsd-train` wrote "
                                                  "with training.lora) applied to `model` and merged (needs peft)")
    chat_template_kwargs: dict[str, TemplateValue] = Field(
        default_factory=dict, description="options passed to the chat template, e.g. `{enable_thinking: false}` "
                                          "(Qwen3), `{date_string: 26 Jul 2024}` (Llama-3.x); a template that reads "
                                          "today's date gets a fixed `date_string` unless you give one")
    prompt_format: Literal["chat", "raw"] = Field(
        "chat", description="`chat`: the tokenizer's chat template; `raw`: the prompt text as is, BOS as the "
                            "tokenizer adds it (a -Base student without a template)")
    stop_strings: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="a completion also ends where one of these strings is complete "
                                          "(raw prompts of a Base student, e.g. `\"\\n\\nQuestion:\"`)")


class TeacherOptions(BaseModel):
    """A teacher's own loading and template options; each left out (None) is the student's."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(None, description="default: the student's")
    device: Device = Field(None, description="default: the student's")
    device_map: DeviceMap | None = Field(None, description="e.g. `auto`: an 8B teacher split over GPUs")
    attn_implementation: Attn = Field(None, description="default: the student's")
    trust_remote_code: bool | None = Field(None, description="default: the student's")
    allow_download: bool | None = Field(None, description="default: the student's")
    adapter: str | None = Field(None, description="a LoRA adapter directory for this teacher's model (merged)")
    chat_template_kwargs: dict[str, TemplateValue] | None = Field(
        None, description="template options of this view (default: the student's), e.g. a thinking and a "
                          "non-thinking view of one model as two teacher configs")


def check_self_teacher(teacher) -> None:
    """A self-teacher is the student's weights: loading options of its own would be silently unused."""
    own = [k for k in ("dtype", "device", "device_map", "attn_implementation", "trust_remote_code",
                       "allow_download", "adapter") if getattr(teacher, k) is not None]
    if own:
        raise ValueError(f"a self-teacher uses the student's weights, so {', '.join(own)} cannot be set here: "
                         "set them on the student, or name the teacher's model")


def check_base(base) -> None:
    """The base never renders a prompt of its own (it scores the student's or a teacher's view)."""
    if base.chat_template_kwargs or base.prompt_format != "chat" or base.stop_strings:
        raise ValueError("base: the base scores the student's or each teacher's view (scoring.base_view) and "
                         "never renders its own: set chat_template_kwargs, prompt_format and stop_strings on "
                         "the student or the teachers")


INHERITED = ("dtype", "device", "device_map", "attn_implementation", "trust_remote_code", "allow_download",
             "chat_template_kwargs")


def teacher_model_spec(student, teacher):
    """The teacher's ``ModelSpec``: the student's, with the teacher's model, revision and every option it sets.

    ``stop_strings`` and ``prompt_format`` are the student's (the rollout is the student's); the
    adapter is the teacher's own (an adapter belongs to its weights).
    """
    update = {"model": teacher.model, "revision": teacher.revision, "adapter": teacher.adapter}
    update.update({k: getattr(teacher, k) for k in INHERITED if getattr(teacher, k) is not None})
    return student.model_copy(update=update)


def view_template_kwargs(student, teacher) -> dict:
    """The chat-template options of a teacher view: its own, else the student's."""
    return dict(student.chat_template_kwargs if teacher.chat_template_kwargs is None else teacher.chat_template_kwargs)

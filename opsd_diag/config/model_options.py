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

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

# A chat-template option is a plain value: templates read flags and strings (enable_thinking, date_string).
TemplateValue = str | int | float | bool | None

# What the tool itself decides, by kind: a chat_template_kwargs key among these is refused, naming it.
_RENDER = ("an argument of the render, which opsd-diag sets itself (every view is its prompt as text, ending in the "
           "generation prompt)")
RESERVED_TEMPLATE_OPTIONS = {
    **dict.fromkeys(("add_generation_prompt", "continue_final_message", "tokenize", "chat_template", "padding",
                     "truncation", "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask",
                     "tokenizer_kwargs", "sanitize_control_tokens"), _RENDER),
    **dict.fromkeys(("conversation", "messages", "tools", "documents"),
                    "an input the template gets from the data (the problem's messages; no tools or documents)"),
    **dict.fromkeys(("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
                     "additional_special_tokens", "extra_special_tokens"),
                    "a special token the template gets from the tokenizer"),
    **dict.fromkeys(("strftime_now", "raise_exception", "namespace", "dict", "range", "lipsum", "cycler", "joiner"),
                    "a function the template calls (strftime_now tells the fixed day: set date_string instead)"),
}


def _template_options(v):
    """Refuse a key the tool decides before the values' types are checked (``tools: [...]`` names ``tools``)."""
    for key in v if isinstance(v, dict) else ():
        if key in RESERVED_TEMPLATE_OPTIONS:
            raise ValueError(f"'{key}' is {RESERVED_TEMPLATE_OPTIONS[key]}, not a template option: remove it "
                             "(chat_template_kwargs holds only what the template reads, e.g. enable_thinking, "
                             "date_string)")
    return v


TemplateOptions = Annotated[dict[str, TemplateValue], BeforeValidator(_template_options)]
DeviceMap = str | dict[str, int | str]


def _device(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v):
        raise ValueError(f"unknown device {v!r}: use auto, cpu, cuda, cuda:N or mps")
    return v


def _attn(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(r"[A-Za-z0-9_\-./]+", v):
        raise ValueError(f"attn_implementation {v!r}: use eager, sdpa, flash_attention_2, ... (letters, digits, _-./)")
    return v


def _device_map(v: DeviceMap | None) -> DeviceMap | None:
    """transformers' strategies or one device by name; a {module: device} map with devices by name or GPU index."""
    if isinstance(v, str) and not re.fullmatch(r"auto|balanced|balanced_low_0|sequential|cpu|mps|cuda(:\d+)?", v):
        raise ValueError(f"device_map {v!r}: use auto, balanced, balanced_low_0, sequential, one device (cpu, "
                         "cuda:N, mps), or {module: device}")
    for module, where in (v.items() if isinstance(v, dict) else ()):
        if not (isinstance(where, int) and where >= 0 or isinstance(where, str)
                and re.fullmatch(r"cpu|mps|cuda(:\d+)?|\d+", where)):
            raise ValueError(f"device_map puts '{module}' on {where!r}: use cpu, cuda:N, a GPU index N or mps")
    return v


Device = Annotated[str | None, AfterValidator(_device)]
DeviceMapOption = Annotated[DeviceMap | None, AfterValidator(_device_map)]
Attn = Annotated[str | None, AfterValidator(_attn)]


class ModelOptions(BaseModel):
    """Fields shared by the student's and the base's model sections (``ModelSpec``)."""
    device: Device = Field(None, description="this model's device (default: the top-level `device`)")
    device_map: DeviceMapOption = Field(
        None, description="transformers `device_map` (`auto`, `balanced`, or {module: device}): split a large "
                          "model over GPUs; the model is then not moved to `device`")
    attn_implementation: Attn = Field(None, description="`eager`, `sdpa`, `flash_attention_2`, ... (default: "
                                                        "transformers' choice)")
    adapter: str | None = Field(None, description="a LoRA adapter directory (e.g. a checkpoint `opsd-train` wrote "
                                                  "with training.lora) applied to `model` and merged (needs peft)")
    chat_template_kwargs: TemplateOptions = Field(
        default_factory=dict, description="plain values the chat template reads, e.g. `{enable_thinking: false}` "
                                          "(Qwen3), `{date_string: 26 Jul 2024}` (Llama-3.x); what the tool sets "
                                          "itself (`add_generation_prompt`, `tokenize`, `tools`, `chat_template`, "
                                          "special tokens, ...) is refused. A template that reads today's date "
                                          "(`strftime_now`, by any path) gets 26 Jul 2024, or your `date_string` "
                                          "when it reads as a date (`26 Jul 2024`, `2024-07-26`): a prompt never "
                                          "changes with the day")
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
    device_map: DeviceMapOption = Field(None, description="e.g. `auto`: an 8B teacher split over GPUs")
    attn_implementation: Attn = Field(None, description="default: the student's")
    trust_remote_code: bool | None = Field(None, description="default: the student's")
    allow_download: bool | None = Field(None, description="default: the student's")
    adapter: str | None = Field(None, description="a LoRA adapter directory for this teacher's model (merged)")
    chat_template_kwargs: TemplateOptions | None = Field(
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

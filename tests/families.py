"""Tiny random models of real families, with the real chat templates (tests/fixtures/templates/) and
each family's special tokens, saved as transformers checkpoints in seconds.

The tokenizer is a byte-level BPE trained on a few sentences (any text encodes); the special tokens,
BOS/EOS/pad and generation_config EOS ids follow the family's real checkpoints:

- qwen3: ``<|im_end|>`` EOS, generation_config [<|im_end|>, <|endoftext|>]; ``<think>``/``</think>``
  are added, non-special tokens (as in Qwen3's tokenizer). qwen3_base: EOS ``<|endoftext|>`` only.
- llama3_1 / llama3_2: BOS ``<|begin_of_text|>`` added by the tokenizer, EOS ``<|eot_id|>``,
  generation_config [<|end_of_text|>, <|eom_id|>, <|eot_id|>]; llama3_base: no template, EOS
  ``<|end_of_text|>``.
- gemma3: BOS ``<bos>``, EOS ``<eos>``, generation_config [<eos>, <end_of_turn>]; gemma4: ``<|turn>``,
  ``<turn|>``, the thought channel ``<|channel>``/``<channel|>`` (special); gemma2: the template that
  refuses a system role.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

TEMPLATES = Path(__file__).resolve().parent / "fixtures" / "templates"
CORPUS = ["The answer is 42. Answer: 7", "Solve 3 + 4 = 7 step by step.", "\\boxed{5} think about it",
          "Hint: add the numbers. Question: what is 12 * 3?", "A correct solution, for reference:"] * 4

LLAMA = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
         "<|eot_id|>", "<|python_tag|>"]
QWEN = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
GEMMA3 = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>"]
GEMMA4 = ["<pad>", "<eos>", "<bos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|\"|>"]

FAMILIES = {
    "qwen3": dict(template="qwen3", arch="qwen3", special=QWEN, added=["<think>", "</think>"], bos=None,
                  eos="<|im_end|>", pad="<|endoftext|>", gen_eos=["<|im_end|>", "<|endoftext|>"]),
    "qwen3_base": dict(template="qwen3", arch="qwen3", special=QWEN, added=["<think>", "</think>"], bos=None,
                       eos="<|endoftext|>", pad="<|endoftext|>", gen_eos=["<|endoftext|>"]),
    "llama3_1": dict(template="llama3_1", arch="llama", special=LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>",
                     pad=None, gen_eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]),
    "llama3_2": dict(template="llama3_2", arch="llama", special=LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>",
                     pad=None, gen_eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]),
    "llama3_base": dict(template=None, arch="llama", special=LLAMA, bos="<|begin_of_text|>", eos="<|end_of_text|>",
                        pad=None, gen_eos=["<|end_of_text|>"]),
    "gemma3": dict(template="gemma3", arch="gemma3", special=GEMMA3, bos="<bos>", eos="<eos>", pad="<pad>",
                   gen_eos=["<eos>", "<end_of_turn>"]),
    "gemma4": dict(template="gemma4", arch="gemma3", special=GEMMA4, bos="<bos>", eos="<eos>", pad="<pad>",
                   gen_eos=["<eos>", "<turn|>"]),
    "gemma2": dict(template="gemma2", arch="gemma3", special=GEMMA3, bos="<bos>", eos="<eos>", pad="<pad>",
                   gen_eos=["<eos>", "<end_of_turn>"]),
}


def template(name: str) -> str:
    """A fixture's exact template text (its first line, the provenance header, removed)."""
    return (TEMPLATES / f"{name}.jinja").read_text().split("\n", 1)[1]


def tokenizer(family: str, template_text: str | None = "default") -> PreTrainedTokenizerFast:
    f = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=f["special"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if f["bos"]:  # Llama-3 and Gemma tokenizers add BOS themselves
        tok.post_processor = processors.TemplateProcessing(single=f"{f['bos']} $A",
                                                           special_tokens=[(f["bos"], tok.token_to_id(f["bos"]))])
    chat = template(f["template"]) if template_text == "default" and f["template"] else (
        None if template_text == "default" else template_text)
    out = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=f["bos"], eos_token=f["eos"], pad_token=f["pad"],
                                  unk_token=None, chat_template=chat, additional_special_tokens=
                                  [t for t in f["special"] if t not in (f["bos"], f["eos"], f["pad"])])
    if f.get("added"):
        out.add_tokens(f["added"])  # non-special, as Qwen3's <think>
    return out


def _config(arch: str, vocab: int, tok, softcap: float | None):
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen3Config

    common = dict(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=256,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                  tie_word_embeddings=False)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen3":
        return Qwen3Config(**common)
    return Gemma3TextConfig(**common, final_logit_softcapping=softcap, sliding_window=32,
                            layer_types=["full_attention"])


def build(family: str, out: Path, *, seed: int = 0, extra_rows: int = 0, generation_config: bool = True,
          softcap: float | None = None, template_text: str | None = "default") -> Path:
    """Save tokenizer + tiny random model of ``family`` in ``out``; ``extra_rows``: LM-head padding rows."""
    from transformers import AutoModelForCausalLM

    tok = tokenizer(family, template_text)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(FAMILIES[family]["arch"], len(tok) + extra_rows, tok, softcap))
    gen = [tok.convert_tokens_to_ids(t) for t in FAMILIES[family]["gen_eos"]]
    model.generation_config.eos_token_id = gen
    model.generation_config.pad_token_id = tok.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    if not generation_config:
        (out / "generation_config.json").unlink(missing_ok=True)
    return out


def ids(tok, *tokens: str) -> list[int]:
    return [tok.convert_tokens_to_ids(t) for t in tokens]

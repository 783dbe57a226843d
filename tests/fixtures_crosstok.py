"""A toy teacher of "another family": its own byte-level BPE (digits not split, its own special tokens,
a BOS and a Llama-3-like chat template), built in well under a second; and tiny models on it."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from opsd_diag.zoo import task

BOS, EOT, PAD = "<|begin_of_text|>", "<|eot_id|>", "<|finetune_pad|>"
HEADER_START, HEADER_END = "<|start_header_id|>", "<|end_header_id|>"
CHAT_TEMPLATE = (
    "{{- '<|begin_of_text|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


def corpus(n: int = 200, seed: int = 3) -> list[str]:
    problems = task.generate(n, seed)
    return ([task.reasoning_response(p) for p in problems] + [p["prompt"] for p in problems]
            + ["caf\u00e9 na\u00efve \u4e2d\u6587 <think> </think> the result is"])


def teacher_tokenizer(texts: list[str], vocab_size: int = 420) -> PreTrainedTokenizerFast:
    """Byte-level BPE whose merges cross digits ("12" can be one token where the zoo splits it)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOT, PAD, HEADER_START, HEADER_END],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOT, pad_token=PAD,
                                   unk_token=None, chat_template=CHAT_TEMPLATE, model_max_length=1024)

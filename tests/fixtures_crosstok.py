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


def build_model_dir(out, tok, seed: int, hidden: int = 48):
    """A random tiny Qwen3 on ``tok`` saved with its tokenizer (a teacher or base of the other family)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    eos = [tok.convert_tokens_to_ids(EOT)]
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=1024,
                      tie_word_embeddings=False, pad_token_id=tok.pad_token_id, eos_token_id=eos,
                      bos_token_id=tok.bos_token_id)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # peakier than the default init, so the signals are far from their trivial values
        model.lm_head.weight.mul_(20.0)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_other_family(root, seed: int = 0) -> tuple:
    """(teacher dir, base dir) of a family whose tokenizer differs from the zoo's."""
    tok = teacher_tokenizer(corpus())
    return build_model_dir(root / "x_teacher", tok, seed), build_model_dir(root / "x_base", tok, seed + 1)

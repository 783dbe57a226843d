"""Sampled token sequences that are not the tokenizer's own encoding of their text (issue 34, item 4):
each sampled token is placed by its own bytes, and only what does not round-trip at the byte level is
dropped. Against slow references written from the tokens' own strings with explicit loops."""

from __future__ import annotations

import json
import random

import pytest
from conftest import ZOO
from fixtures_crosstok import corpus, teacher_tokenizer
from test_align import _bytes_to_unicode, as_list, random_text, ref_spans
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from opsd_diag.core.align import byte_prefix, char_offsets, common_spans
from opsd_diag.io.retokenize import Retokenized, retokenize, special_ids
from opsd_diag.io.token_bytes import token_bytes

BYTE_OF = {ch: b for b, ch in enumerate(_bytes_to_unicode())}  # GPT-2's alphabet, written out in test_align


# ---------------------------------------------------------------- tokenizers: bundled and built here


@pytest.fixture(scope="module")
def qwen_tok():
    """The bundled zoo's Qwen-style byte-level BPE (digits split, <|im_end|>)."""
    return AutoTokenizer.from_pretrained(ZOO / "student")


@pytest.fixture(scope="module")
def llama_tok():
    """A Llama-3-style byte-level BPE (its special tokens and template, merges across words), with a vocabulary
    large enough to hold tokens that end or start inside a character ("naÃ" = b"na\\xc3", "¯veĠ")."""
    return teacher_tokenizer(corpus(), vocab_size=2000)


@pytest.fixture(scope="module")
def sp_tok():
    """A Llama-2/Mistral-style SentencePiece BPE: Metaspace pre-tokenizer, <0xHH> byte fallback, decoder
    Replace("▁", " ") + ByteFallback + Fuse + Strip(" ", 1, 0)."""
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trained.train_from_iterator(corpus()[:100], trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    model = json.loads(trained.to_str())["model"]
    vocab = dict(model["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<unk>")


# ---------------------------------------------------------------- slow references (token strings, loops)


def ref_bytes(tok, ids: list[int]) -> list[bytes]:
    """Each token's bytes from its own string: GPT-2's alphabet (byte-level BPE), else "▁" a space and <0xHH>
    one byte, the first token's leading space dropped (the Strip after Fuse)."""
    out = []
    for k, t in enumerate(tok.convert_ids_to_tokens(ids)):
        if isinstance(tok.backend_tokenizer.decoder, decoders.ByteLevel):
            out.append(bytes(BYTE_OF[c] for c in t))
            continue
        piece = bytes([int(t[3:5], 16)]) if len(t) == 6 and t.startswith("<0x") else t.replace("\u2581", " ").encode()
        out.append(piece[1:] if k == 0 and piece.startswith(b" ") else piece)
    return out


def ref_char_spans(pieces: list[bytes]) -> list[tuple[int, int]]:
    """Each piece's characters: the set of those its bytes belong to (an empty piece: none, or the one it sits in)."""
    text = b"".join(pieces).decode()
    owner = [i for i, ch in enumerate(text) for _ in ch.encode()]  # byte -> its character
    out, pos = [], 0
    for piece in pieces:
        touched = {owner[p] for p in range(pos, pos + len(piece))}
        if not touched and 0 < pos < len(owner) and owner[pos - 1] == owner[pos]:
            touched = {owner[pos]}  # an empty piece between two bytes of one character
        at = owner[pos] if pos < len(owner) else len(text)
        out.append((min(touched), max(touched) + 1) if touched else (at, at))
        pos += len(piece)
    return out


def ref_keep(pieces: list[bytes]) -> int:
    """The most whole pieces whose bytes are valid UTF-8 (every prefix tried)."""
    keep = 0
    for k in range(len(pieces) + 1):
        try:
            b"".join(pieces[:k]).decode("utf-8")
            keep = k
        except UnicodeDecodeError:
            pass
    return keep


def check_against_reference(s_tok, t_tok, ids: list[int]) -> Retokenized:
    """``retokenize`` of a sampled sequence equals the byte-cut reference of test_align, spans and text."""
    out = retokenize(ids, s_tok, t_tok, [], None)
    assert isinstance(out, Retokenized) and not out.cut, out
    s_pieces = ref_bytes(s_tok, ids)
    text = b"".join(s_pieces).decode()
    assert t_tok.decode(out.teacher_ids) == text == s_tok.decode(ids)
    t_pieces = ref_bytes(t_tok, out.teacher_ids)
    s_lead, t_lead = int(not s_pieces[0]), int(not t_pieces[0])  # a first "▁" of no text: in the first span
    ref = ref_spans(text, s_pieces[s_lead:], t_pieces[t_lead:])
    ref = [((s[0] + s_lead * bool(j), s[1] + s_lead), (t[0] + t_lead * bool(j), t[1] + t_lead), c)
           for j, (s, t, c) in enumerate(ref)]
    assert as_list(out.spans) == ref, text
    return out


def non_canonical(tok, ids: list[int]) -> bool:
    return tok(tok.decode(ids), add_special_tokens=False)["input_ids"] != list(ids)


# ---------------------------------------------------------------- (a) spans of a non-canonical sequence


def test_a_non_canonical_sequence_by_hand(qwen_tok):
    """"Apply in order" sampled as A|p|ply|Ġ|in|Ġorder (the bundled tokenizer spells Ap|ply|Ġin|Ġorder) against the
    Llama-style teacher's Ap|plyĠin|Ġor|der: the spans written out by hand."""
    teacher = teacher_tokenizer(corpus())
    ids = qwen_tok.convert_tokens_to_ids(["A", "p", "ply", "\u0120", "in", "\u0120order"])
    assert None not in ids and non_canonical(qwen_tok, ids)
    assert teacher.convert_ids_to_tokens(teacher("Apply in order", add_special_tokens=False)["input_ids"]) == [
        "Ap", "ply\u0120in", "\u0120or", "der"]
    assert char_offsets(token_bytes(qwen_tok, ids)) == ("Apply in order", [(0, 1), (1, 2), (2, 5), (5, 6), (6, 8),
                                                                           (8, 14)])
    out = check_against_reference(qwen_tok, teacher, ids)
    assert as_list(out.spans) == [((0, 2), (0, 1), (0, 2)), ((2, 5), (1, 2), (2, 8)), ((5, 6), (2, 4), (8, 14))]
    assert out.n_student == 6


@pytest.mark.parametrize("which", ["qwen", "llama", "sp"])
def test_token_bytes_and_char_spans_equal_the_reference(which, qwen_tok, llama_tok, sp_tok):
    tok = {"qwen": qwen_tok, "llama": llama_tok, "sp": sp_tok}[which]
    rng = random.Random(2)
    specials = special_ids(tok)
    ordinary = [i for i in range(len(tok)) if i not in specials]
    checked = 0
    for _ in range(300):
        ids = [rng.choice(ordinary) for _ in range(rng.randint(1, 12))]
        pieces = token_bytes(tok, ids)
        assert pieces == ref_bytes(tok, ids)
        keep = byte_prefix(pieces)
        assert keep == ref_keep(pieces)
        if keep:
            text, offsets = char_offsets(pieces[:keep])
            assert text == tok.decode(ids[:keep]) and offsets == ref_char_spans(pieces[:keep])
            checked += 1
    assert checked > 100


def split_tokens(tok, ids: list[int], rng: random.Random) -> list[int]:
    """A non-canonical spelling of the same bytes: some tokens replaced by one token per byte."""
    out = []
    for t, piece in zip(ids, token_bytes(tok, ids)):
        if len(piece) > 1 and rng.random() < 0.5:
            if isinstance(tok.backend_tokenizer.decoder, decoders.ByteLevel):
                out += tok.convert_tokens_to_ids([_bytes_to_unicode()[b] for b in piece])
            else:
                out += tok.convert_tokens_to_ids([f"<0x{b:02X}>" for b in piece]) if out else [t]
        else:
            out.append(t)
    return out


@pytest.mark.parametrize("pair", [("qwen", "llama"), ("llama", "qwen"), ("sp", "qwen"), ("qwen", "sp")])
def test_non_canonical_random_sequences_align_as_sampled(pair, qwen_tok, llama_tok, sp_tok):
    toks = {"qwen": qwen_tok, "llama": llama_tok, "sp": sp_tok}
    s_tok, t_tok = toks[pair[0]], toks[pair[1]]
    rng = random.Random(3)
    odd = 0
    for _ in range(150):
        text = random_text(rng).lstrip(" \n")
        if not text:
            continue
        ids = split_tokens(s_tok, s_tok(text, add_special_tokens=False)["input_ids"], rng)
        odd += non_canonical(s_tok, ids)
        check_against_reference(s_tok, t_tok, ids)
    assert odd > 60  # most sequences are not the student's own encoding: the old rule left each of them out


# ---------------------------------------------------------------- (b) the byte-level round-trip rule


def test_a_token_inside_a_character_keeps_the_character_whole(llama_tok, qwen_tok):
    """"naïve " as naÃ|¯veĠ (each token holds a part of "ï"): one span over the character, never a cut in it."""
    ids = llama_tok.convert_tokens_to_ids(["na\u00c3", "\u00afve\u0120"])
    pieces = token_bytes(llama_tok, ids)
    assert pieces == [b"na\xc3", b"\xafve "] and byte_prefix(pieces) == 2
    assert char_offsets(pieces) == ("na\u00efve ", [(0, 3), (2, 6)])
    out = check_against_reference(llama_tok, qwen_tok, ids)
    assert out.spans.student == ((0, 2),) and out.spans.chars == ((0, 6),)
    # "é" as its two bytes Ã|© (each alone not text): aligned, both bytes in the span of the character
    ids = qwen_tok.convert_tokens_to_ids(["c", "a", "f", "\u00c3", "\u00a9"])
    out = check_against_reference(qwen_tok, llama_tok, ids)
    assert out.spans.student[-1][1] == 5 and all(lo != 4 for lo, _ in out.spans.student)


def test_only_what_does_not_round_trip_is_dropped(qwen_tok, llama_tok):
    stop = qwen_tok.convert_tokens_to_ids("<|im_end|>")
    eos = llama_tok.eos_token_id
    head = qwen_tok("Step 1: ", add_special_tokens=False)["input_ids"]
    lead, cont = qwen_tok.convert_tokens_to_ids(["\u00c3", "\u00a9"])  # é's first and second byte
    x = qwen_tok.convert_tokens_to_ids("x")
    # a lead byte the next token does not complete: cut before it; the stop id after it is not paired
    out = retokenize(head + [lead, x, stop], qwen_tok, llama_tok, [stop], eos)
    assert out.n_student == len(head) and not out.stopped and "UTF-8" in out.cut
    assert llama_tok.decode(out.teacher_ids) == "Step 1: " and out.teacher_ids[-1] != eos
    assert sum(hi - lo for lo, hi in out.spans.student) == len(head)
    # the same bytes completed by the next token: the whole row, the stop id paired
    out = retokenize(head + [lead, cont, x, stop], qwen_tok, llama_tok, [stop], eos)
    assert out.n_student == len(head) + 4 and out.stopped and not out.cut and out.teacher_ids[-1] == eos
    assert llama_tok.decode(out.teacher_ids[:-1]) == "Step 1: \u00e9x"
    # a stray continuation byte first: nothing to keep, the row is left out with its reason
    assert "UTF-8" in retokenize([cont] + head, qwen_tok, llama_tok, [stop], eos)
    # a completion that ends inside a character (sampling stopped there): cut before the fragment
    out = retokenize(head + [lead], qwen_tok, llama_tok, [], None)
    assert out.n_student == len(head) and "UTF-8" in out.cut


def test_canonical_sequences_align_exactly_as_before(qwen_tok, llama_tok, sp_tok):
    """On a tokenizer's own encodings the spans are those of its offsets (the rule before sampled spans)."""
    rng = random.Random(4)
    for s_tok, t_tok in ((qwen_tok, llama_tok), (llama_tok, qwen_tok), (sp_tok, qwen_tok), (qwen_tok, sp_tok)):
        for _ in range(120):
            text = random_text(rng).lstrip(" \n")
            enc_s = s_tok(text, add_special_tokens=False, return_offsets_mapping=True)
            enc_t = t_tok(text, add_special_tokens=False, return_offsets_mapping=True)
            if not text or t_tok.decode(enc_t["input_ids"]) != text:
                continue
            out = retokenize(enc_s["input_ids"], s_tok, t_tok, [], None)
            before = common_spans(enc_s["offset_mapping"], enc_t["offset_mapping"], len(text))
            assert isinstance(out, Retokenized) and out.teacher_ids == enc_t["input_ids"]
            assert out.spans == before, text

"""core/align.py and io/retokenize.py against a slow reference built from the tokens' own bytes."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from opsd_diag.core.align import Spans, common_spans
from opsd_diag.io.retokenize import Retokenized, retokenize
from fixtures_crosstok import corpus, teacher_tokenizer

from opsd_diag.zoo.tokenizer import train_tokenizer

# ---------------------------------------------------------------- slow reference (bytes, explicit loops)


def ref_spans(text: str, student_pieces: list[bytes], teacher_pieces: list[bytes]) -> list[tuple]:
    """The finest partition into whole tokens of both sides whose cuts fall on character boundaries.

    Written from the pieces' bytes (not from offsets): a cut is a byte position that is a cumulative
    piece length on both sides and the start of a UTF-8 character."""
    data = text.encode()
    assert b"".join(student_pieces) == data and b"".join(teacher_pieces) == data
    char_at = {}  # byte position of each character start -> character index
    pos = 0
    for i, ch in enumerate(text):
        char_at[pos] = i
        pos += len(ch.encode())
    char_at[pos] = len(text)

    def cuts(pieces):
        out, pos = {0: 0}, 0
        for k, piece in enumerate(pieces):
            pos += len(piece)
            out[pos] = k + 1
        return out

    s, t = cuts(student_pieces), cuts(teacher_pieces)
    common = [b for b in sorted(set(s) & set(t)) if b in char_at]
    return [((s[a], s[b]), (t[a], t[b]), (char_at[a], char_at[b])) for a, b in zip(common, common[1:])]


def as_list(spans: Spans) -> list[tuple]:
    return list(zip(spans.student, spans.teacher, spans.chars))


def offsets_of(pieces: list[str]) -> list[tuple[int, int]]:
    out, pos = [], 0
    for p in pieces:
        out.append((pos, pos + len(p)))
        pos += len(p)
    return out


# ---------------------------------------------------------------- hand-made splits


def test_one_student_token_against_three_teacher_tokens_and_the_reverse():
    text = "the cat sat"
    student = ["the", " cat", " sat"]
    teacher = ["t", "h", "e", " c", "at", " sat"]
    spans = common_spans(offsets_of(student), offsets_of(teacher), len(text))
    assert as_list(spans) == [((0, 1), (0, 3), (0, 3)), ((1, 2), (3, 5), (3, 7)), ((2, 3), (5, 6), (7, 11))]
    assert as_list(spans) == ref_spans(text, [p.encode() for p in student], [p.encode() for p in teacher])
    reverse = common_spans(offsets_of(teacher), offsets_of(student), len(text))
    assert as_list(reverse) == [(t, s, c) for s, t, c in as_list(spans)]
    assert spans.student_index() == [0, 1, 2] and spans.teacher_index() == [0, 0, 0, 1, 1, 2]


def test_crossing_boundaries_merge_into_the_smallest_common_span():
    text = "abcdef"
    spans = common_spans(offsets_of(["ab", "cd", "ef"]), offsets_of(["abc", "def"]), len(text))
    assert as_list(spans) == [((0, 3), (0, 2), (0, 6))]
    spans = common_spans(offsets_of(["ab", "cd", "ef"]), offsets_of(["a", "bcd", "ef"]), len(text))
    assert as_list(spans) == [((0, 2), (0, 2), (0, 4)), ((2, 3), (2, 3), (4, 6))]


def test_split_multibyte_character_has_no_cut_inside_it():
    text = "a\u00e9b"  # é is 2 bytes: the teacher splits it into two byte-level tokens
    student = [(0, 1), (1, 2), (2, 3)]
    teacher = [(0, 1), (1, 2), (1, 2), (2, 3)]  # both fragments map to the character, as fast tokenizers do
    spans = common_spans(student, teacher, len(text))
    assert as_list(spans) == [((0, 1), (0, 1), (0, 1)), ((1, 2), (1, 3), (1, 2)), ((2, 3), (3, 4), (2, 3))]
    ref = ref_spans(text, [b"a", "\u00e9".encode(), b"b"], [b"a", b"\xc3", b"\xa9", b"b"])
    assert as_list(spans) == ref
    # both sides split the character at the same byte: still no cut inside it (offsets cannot say where)
    both = common_spans(teacher, teacher, len(text))
    assert as_list(both) == ref_spans(text, [b"a", b"\xc3", b"\xa9", b"b"], [b"a", b"\xc3", b"\xa9", b"b"])
    assert both.chars == ((0, 1), (1, 2), (2, 3))


def test_gaps_in_offsets_are_never_a_cut():
    text = "ab cd"
    student = [(0, 2), (3, 5)]  # whitespace trimmed from the offsets: nobody owns character 2
    teacher = [(0, 2), (2, 5)]
    assert as_list(common_spans(student, teacher, len(text))) == [((0, 2), (0, 2), (0, 5))]


def test_offsets_that_do_not_tile_the_text_are_refused():
    with pytest.raises(ValueError, match="ordered tiling"):
        common_spans([(0, 2), (1, 1)], [(0, 3)], 3)
    with pytest.raises(ValueError, match="ordered tiling"):
        common_spans([(0, 4)], [(0, 3)], 3)
    assert len(common_spans([], [], 0)) == 0


# ---------------------------------------------------------------- real byte-level BPEs


@pytest.fixture(scope="module")
def tokenizers_pair():
    texts = corpus()
    return train_tokenizer(texts, vocab_size=400), teacher_tokenizer(texts)


def byte_pieces(tok, ids: list[int]) -> list[bytes]:
    """Each token's raw bytes, through the byte-level alphabet (independent of offsets and decode)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    to_byte = {ch: b for b, ch in enumerate(_bytes_to_unicode())}
    assert set(to_byte) == set(alphabet)
    return [bytes(to_byte[c] for c in tok.convert_ids_to_tokens(i)) for i in ids]


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character table, written out (byte b is character out[b])."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def random_text(rng: random.Random) -> str:
    words = ["a) 9+8=7", "\nAnswer: ", "Apply in order", "Step", " 1", ":", " 12", " +", " 7", " =", " 19", "\n", " caf\u00e9", " \u4e2d\u6587", "\u00ef", "  ",
             " na\u00efve", "x", " <think>", "\u4e2d"]
    return "".join(rng.choice(words) for _ in range(rng.randint(1, 25)))


def test_spans_from_offsets_equal_the_byte_reference_on_random_texts(tokenizers_pair):
    student_tok, teacher_tok = tokenizers_pair
    rng = random.Random(0)
    split_differs = 0
    for _ in range(200):
        text = random_text(rng)
        es = student_tok(text, add_special_tokens=False, return_offsets_mapping=True)
        et = teacher_tok(text, add_special_tokens=False, return_offsets_mapping=True)
        spans = common_spans(es["offset_mapping"], et["offset_mapping"], len(text))
        ref = ref_spans(text, byte_pieces(student_tok, es["input_ids"]), byte_pieces(teacher_tok, et["input_ids"]))
        assert as_list(spans) == ref, text
        split_differs += any(s[1] - s[0] != t[1] - t[0] for s, t, _ in ref)
    assert split_differs > 50  # the two tokenizers really split differently


def test_retokenize_round_trips_and_pairs_the_stop_id(tokenizers_pair):
    student_tok, teacher_tok = tokenizers_pair
    text = "Step 1: caf\u00e9 + 7 = \u4e2d\u6587"
    ids = student_tok(text, add_special_tokens=False)["input_ids"]
    stop = student_tok.eos_token_id
    out = retokenize(ids + [stop], student_tok, teacher_tok, [stop], teacher_tok.eos_token_id)
    assert isinstance(out, Retokenized) and out.stopped
    assert out.teacher_ids[-1] == teacher_tok.eos_token_id
    assert out.spans.student[-1] == (len(ids), len(ids) + 1) and out.spans.chars[-1] == (len(text), len(text))
    assert teacher_tok.decode(out.teacher_ids[:-1]) == text
    for (s_lo, s_hi), (t_lo, t_hi), (a, b) in zip(out.spans.student[:-1], out.spans.teacher, out.spans.chars):
        assert student_tok.decode(ids[s_lo:s_hi]) == text[a:b] == teacher_tok.decode(out.teacher_ids[t_lo:t_hi])
    assert out.spans.student_index() == [j for j in range(len(out.spans)) for _ in range(
        out.spans.student[j][1] - out.spans.student[j][0])]


def test_rows_that_do_not_round_trip_are_cut_or_flagged(tokenizers_pair):
    """Only what does not round-trip is dropped (tests/test_align_sampled.py holds the byte-level reference)."""
    student_tok, teacher_tok = tokenizers_pair
    stop = student_tok.eos_token_id
    ids = student_tok("Step 12", add_special_tokens=False)["input_ids"]
    # a special token inside the completion: the row is cut before it, its stop id is not paired
    im_start = student_tok.convert_tokens_to_ids("<|im_start|>")
    out = retokenize(ids[:1] + [im_start] + ids[1:] + [stop], student_tok, teacher_tok, [stop], teacher_tok.eos_token_id)
    assert isinstance(out, Retokenized) and out.n_student == 1 and not out.stopped and "special token" in out.cut
    assert out.spans.student == ((0, 1),) and teacher_tok.decode(out.teacher_ids) == student_tok.decode(ids[:1])
    assert "special token" in retokenize([im_start] + ids, student_tok, teacher_tok, [stop], teacher_tok.eos_token_id)
    # a non-canonical split ("Step" spelt as single letters) is aligned as sampled
    letters = [student_tok.convert_tokens_to_ids(c) for c in "Step"]
    out = retokenize(letters, student_tok, teacher_tok, [stop], teacher_tok.eos_token_id)
    assert isinstance(out, Retokenized) and out.n_student == 4 and not out.cut
    assert sum(hi - lo for lo, hi in out.spans.student) == 4 and teacher_tok.decode(out.teacher_ids) == "Step"
    # a byte-level fragment left alone (half of a character): not text, the row is cut before it
    half = student_tok.convert_tokens_to_ids(_bytes_to_unicode()[0xC3])
    out = retokenize(ids + [half], student_tok, teacher_tok, [stop], teacher_tok.eos_token_id)
    assert isinstance(out, Retokenized) and out.n_student == len(ids) and "UTF-8" in out.cut
    assert "UTF-8" in retokenize([half] + ids, student_tok, teacher_tok, [stop], teacher_tok.eos_token_id)
    assert "no end-of-sequence" in retokenize(ids + [stop], student_tok, teacher_tok, [stop], None)


class LyingOffsets:
    """A tokenizer whose offsets move its cut after token ``k`` one character late (whitespace-trimming bugs)."""

    def __init__(self, tok, k):
        self.tok, self.k = tok, k
        self.all_special_ids, self.added_tokens_decoder = tok.all_special_ids, tok.added_tokens_decoder

    def decode(self, ids, **kw):
        return self.tok.decode(ids, **kw)

    def __call__(self, text, **kw):
        enc = self.tok(text, **kw)
        offsets = [list(o) for o in enc["offset_mapping"]]
        offsets[self.k][1] += 1
        offsets[self.k + 1][0] += 1
        return {"input_ids": enc["input_ids"], "offset_mapping": [tuple(o) for o in offsets]}


def test_offsets_that_lie_are_caught_by_the_span_decode_check(tokenizers_pair):
    student_tok, teacher_tok = tokenizers_pair
    text = "Step 1: 12"
    ids = student_tok(text, add_special_tokens=False)["input_ids"]
    honest = retokenize(ids, student_tok, teacher_tok, [], None)
    assert isinstance(honest, Retokenized)
    assert teacher_tok.convert_ids_to_tokens(honest.teacher_ids)[4:6] == ["1", ":Ġ"]
    # the teacher's "1" claims the ":" too, which makes a false common cut after the student's ":"
    lying = retokenize(ids, student_tok, LyingOffsets(teacher_tok, 4), [], None)
    assert isinstance(lying, str) and "do not decode" in lying, lying


# ---------------------------------------------------------------- a SentencePiece-style ("▁") teacher


@pytest.fixture(scope="module")
def metaspace_tok():
    """A Llama-2/Gemma-like tokenizer: Metaspace pre-tokenizer and decoder (the first piece's "▁" dropped
    on decode), every character of the test texts in its alphabet; trained in the test."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.train_from_iterator(corpus() + ["x"], trainer=trainers.BpeTrainer(vocab_size=420, special_tokens=[
        "<unk>", "<s>", "</s>"], show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<unk>")


def metaspace_pieces(tok, ids: list[int]) -> list[bytes]:
    """Each token's bytes from its own string ("▁" a space), the prepended "▁" of the first word none:
    independent of offsets and of the decoder."""
    out = []
    for k, t in enumerate(tok.convert_ids_to_tokens(ids)):
        piece = t.replace("\u2581", " ").encode()
        out.append(piece[1:] if k == 0 and piece.startswith(b" ") else piece)
    return out


def test_a_metaspace_teacher_aligns_on_offsets(tokenizers_pair, metaspace_tok):
    student_tok = tokenizers_pair[0]
    rng = random.Random(1)
    kept = spaced = 0
    for _ in range(120):
        text = random_text(rng).lstrip(" ")
        ids = student_tok(text, add_special_tokens=False)["input_ids"]
        out = retokenize(ids, student_tok, metaspace_tok, [], None)
        if text != text.lstrip() or not text:  # a leading newline or nothing: below
            continue
        assert isinstance(out, Retokenized), (text, out)
        kept += 1
        t_pieces = metaspace_pieces(metaspace_tok, out.teacher_ids)
        ref = ref_spans(text, byte_pieces(student_tok, ids), t_pieces[1:] if not t_pieces[0] else t_pieces)
        if not t_pieces[0]:  # the prepended "▁" (no text) belongs to the first span
            ref = [(s, (t[0] + 1 if j else 0, t[1] + 1), c) for j, (s, t, c) in enumerate(ref)]
        assert as_list(out.spans) == ref, text
        for (t_lo, t_hi), (a, b) in zip(out.spans.teacher, out.spans.chars):
            piece = text[a:b]
            spaced += piece.startswith(" ") and metaspace_tok.decode(out.teacher_ids[t_lo:t_hi]) != piece
    assert kept > 80 and spaced > 50  # spans whose pieces alone decode without their space: aligned now
    # a completion that starts with a space does not round-trip through such a decoder: left out, with why
    ids = student_tok(" Step 1", add_special_tokens=False)["input_ids"]
    assert "does not round-trip" in retokenize(ids, student_tok, metaspace_tok, [], None)


def test_candidates_of_a_metaspace_teacher_are_spelled_in_context(tokenizers_pair, metaspace_tok):
    from opsd_diag.io.retokenize import candidate_teacher_ids, teacher_candidate_student_id

    student_tok = tokenizers_pair[0]
    context = metaspace_tok("Step", add_special_tokens=False)["input_ids"][-1:]
    word = student_tok(" Apply", add_special_tokens=False)["input_ids"]
    assert len(word) == 1
    ids = candidate_teacher_ids(word[0], student_tok, metaspace_tok, [], None, context)
    assert ids is not None and b"".join(metaspace_pieces(metaspace_tok, context + ids)[1:]) == b" Apply"
    # a candidate without a space: the encoder's "▁" would add one, so it has no spelling (never " ep")
    tails = [i for i in range(len(student_tok)) if student_tok.decode([i]).isalpha()]  # no space before
    assert tails and all(candidate_teacher_ids(i, student_tok, metaspace_tok, [], None, context) is None
                         for i in tails)
    # a teacher token "▁Apply" after a word proposes the student's " Apply", not "Apply"
    t_word = metaspace_tok.convert_tokens_to_ids("\u2581Apply")
    assert teacher_candidate_student_id(t_word, metaspace_tok, student_tok, [], None, context) == word[0]

"""A student completion re-tokenised for a teacher with another tokenizer, with its round-trip checks.

Each sampled token is placed by its own bytes (``io.token_bytes``: the decoder's bytes for that token),
so a sampled sequence that is not the student tokenizer's own encoding of its text (random and
high-temperature samples often are not) is aligned as sampled. The text is the tokens' bytes joined;
the teacher encodes it with ``return_offsets_mapping``; both sides are grouped into common spans
(``opsd_diag.core.align``). Only what does not round-trip is dropped, never aligned approximately:

- the row is cut before its first special token (not text the teacher could read) or first token
  past which the bytes are not whole UTF-8 characters (a lone fragment of a character, ``byte_prefix``);
  the tokens before the cut are kept (``n_student``, ``cut`` says why), the row is left out when none is;
- the kept tokens must decode, through the student's own decoder, to exactly their bytes' text;
- the teacher's encoding decodes back to the text and holds no special token;
- every span's tokens decode, on each side, to exactly the span's text after the span before it
  (``spelled``; this catches offsets that lie, e.g. trimmed whitespace attributed to the wrong
  token). The context is what lets a SentencePiece "▁" decoder, which drops the leading space of
  the first piece it decodes, spell a span that starts with a space; it is a whole span (whole
  characters), so a byte-fallback token before the span, a fragment alone, cannot garble it. A
  completion that itself starts with a space still fails the round trip with such a decoder and is
  flagged.

A student tokenizer whose decoder ``io.token_bytes`` does not read falls back to the canonical rule:
the sampled ids must be the re-encoding of their text, whose offsets are used (else the row is left out).
A final stop id of the student (of a row not cut) is paired with the teacher's end-of-sequence id, as
one extra span of no text: both models are asked to end the turn there.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsd_diag.core.align import Spans, byte_prefix, char_offsets, common_spans
from opsd_diag.io.token_bytes import token_bytes


@dataclass(frozen=True)
class Retokenized:
    """One row's teacher completion ids and spans (``spans`` includes the stop span when ``stopped``); the
    spans cover the student's first ``n_student`` tokens (all of them unless ``cut`` says why not)."""
    teacher_ids: list[int]
    spans: Spans
    stopped: bool
    n_student: int  # the completion's first tokens the spans cover (its length unless ``cut``)
    cut: str = ""


def special_ids(tok) -> set[int]:
    """Every id the tokenizer treats as special (named ones and added tokens marked special)."""
    return set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}


def _decode(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def spelled(tok, context: list[int], ids: list[int]) -> str | None:
    """The text ``ids`` add after ``context`` (tokens before them, or none at the start), or None.

    Decoding ``ids`` alone is not enough: a SentencePiece "▁" decoder drops the leading space of the
    first piece it decodes, so " world" alone reads "world"; after one token of context it does not.
    """
    head = _decode(tok, list(context))
    both = _decode(tok, list(context) + list(ids))
    return both[len(head):] if both.startswith(head) else None


def _student_side(body: list[int], student_tok) -> tuple[str, list[tuple[int, int]], str] | str:
    """(the text of the tokens kept, their character offsets, why the rest was cut or ""), or why none is kept."""
    specials = special_ids(student_tok)
    names = student_tok.convert_ids_to_tokens(body)
    n = next((k for k, (t, name) in enumerate(zip(body, names)) if t in specials or name is None), len(body))
    why = "" if n == len(body) else ("a special token inside the completion (or an id the tokenizer does not "
                                     "have): not text the teacher can read")
    pieces = token_bytes(student_tok, body[:n])
    if pieces is None:  # a decoder io.token_bytes does not read: the canonical rule
        if why:
            return why
        text = _decode(student_tok, body)
        enc = student_tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) != body:
            return "the sampled ids are not the student tokenizer's own encoding of their text"
        return text, [tuple(o) for o in enc["offset_mapping"]], ""
    whole = byte_prefix(pieces)
    if whole < n:
        n, why = whole, "a token whose bytes are not whole UTF-8 characters (part of a character, not text)"
    if n == 0:
        return why
    text, offsets = char_offsets(pieces[:n])
    if _decode(student_tok, body[:n]) != text:
        return "the student's tokens do not decode to their own bytes"
    return text, offsets, why


def retokenize(student_ids: list[int], student_tok, teacher_tok, stop_ids: list[int],
               teacher_eos: int | None) -> Retokenized | str:
    """The teacher's re-tokenisation and common spans of one completion, or why the row is left out."""
    body, stopped = list(student_ids), False
    if body and body[-1] in stop_ids:
        body, stopped = body[:-1], True
    if stopped and teacher_eos is None:
        return "the teacher's tokenizer has no end-of-sequence token to pair with the student's stop id"
    side = _student_side(body, student_tok) if body else ("", [], "")
    if isinstance(side, str):
        return side
    text, s_offsets, cut = side
    body, stopped = body[:len(s_offsets)], stopped and not cut
    enc_t = teacher_tok(text, add_special_tokens=False, return_offsets_mapping=True)
    t_ids = list(enc_t["input_ids"])
    if _decode(teacher_tok, t_ids) != text:
        return "the teacher's tokenizer does not round-trip the completion text"
    if set(t_ids) & special_ids(teacher_tok):
        return "the completion text encodes to a special token of the teacher"
    try:
        spans = common_spans(s_offsets, [tuple(o) for o in enc_t["offset_mapping"]], len(text))
    except ValueError as e:
        return f"offsets unusable: {e}"
    s_before, t_before = (0, 0), (0, 0)  # the span before: whole characters, the context each span is read after
    for (s_lo, s_hi), (t_lo, t_hi), (a, b) in zip(spans.student, spans.teacher, spans.chars):
        piece = text[a:b]
        if (spelled(student_tok, body[s_before[0]:s_lo], body[s_lo:s_hi]) != piece
                or spelled(teacher_tok, t_ids[t_before[0]:t_lo], t_ids[t_lo:t_hi]) != piece):
            return f"the tokens of characters {a}-{b} do not decode to their text"
        s_before, t_before = (s_lo, s_hi), (t_lo, t_hi)
    if stopped:
        n_s, n_t = len(body), len(t_ids)
        spans = Spans(spans.student + ((n_s, n_s + 1),), spans.teacher + ((n_t, n_t + 1),),
                      spans.chars + ((len(text), len(text)),))
        t_ids = t_ids + [teacher_eos]
    return Retokenized(t_ids, spans, stopped, len(body) + stopped, cut)


FRAGMENT = "\ufffd"  # what a token holding part of a multi-byte character decodes to


def _same_special(token_id: int, src_tok, dst_tok) -> int | None:
    """The special token of ``dst_tok`` spelled like special ``token_id`` of ``src_tok``, if it has one."""
    content = src_tok.convert_ids_to_tokens(token_id)
    dst = dst_tok.convert_tokens_to_ids(content) if isinstance(content, str) else None
    ok = isinstance(dst, int) and dst in special_ids(dst_tok) and dst_tok.convert_ids_to_tokens(dst) == content
    return dst if ok else None  # (an unknown name converts to the unk id, which is not spelled like it)


def candidate_teacher_ids(cand: int, student_tok, teacher_tok, stop_ids: list[int],
                          teacher_eos: int | None, context: list[int] = ()) -> list[int] | None:
    """The teacher's ids that spell a student candidate token after a common span boundary, or None.

    The predictor's cross-vocabulary approximation (docs/signals.md): the candidate's text encoded
    on its own by the teacher (its canonical tokenisation from that boundary). A special token maps
    to the teacher's special of the same name, else a stop id to the teacher's end of sequence (as
    ``retokenize`` pairs them); a text the teacher cannot spell back, or that holds one of its
    special tokens, or a byte fragment of a character (it decodes to U+FFFD), has no mapping.
    ``context``: the teacher's token before the node (none at the start), against which the ids must
    spell the text (``spelled``: an encoder that puts a "▁" before a text that has no space fails).
    """
    if cand in special_ids(student_tok):
        same = _same_special(cand, student_tok, teacher_tok)
        if same is not None:
            return [same]
        return [teacher_eos] if cand in stop_ids and teacher_eos is not None else None
    text = _decode(student_tok, [cand])
    if FRAGMENT in text:  # a byte of a multi-byte character: no text of its own to spell
        return None
    ids = list(teacher_tok(text, add_special_tokens=False)["input_ids"])
    if not ids or spelled(teacher_tok, context, ids) != text or set(ids) & special_ids(teacher_tok):
        return None
    return ids


def teacher_candidate_student_id(tid: int, teacher_tok, student_tok, stop_ids: list[int],
                                 teacher_eos: int | None, context: list[int] = ()) -> int | None:
    """The student token a teacher's top-k token proposes, or None: its text (after the teacher's
    ``context`` token, ``spelled``) when the student spells it as exactly one token; a special token
    by its name, else the teacher's end of sequence as the student's first stop id."""
    if tid in special_ids(teacher_tok):
        same = _same_special(tid, teacher_tok, student_tok)
        if same is not None:
            return same
        return stop_ids[0] if tid == teacher_eos and stop_ids else None
    text = spelled(teacher_tok, context, [tid])
    if not text or FRAGMENT in text:
        return None
    ids = list(student_tok(text, add_special_tokens=False)["input_ids"])
    ok = len(ids) == 1 and _decode(student_tok, ids) == text and ids[0] not in special_ids(student_tok)
    return ids[0] if ok else None


def single_token_spans(r: Retokenized) -> dict[int, int]:
    """Student position -> teacher prefix length, for every span of exactly one student token: where
    the predictor can put a node of a cross-tokenizer config (the text before it is whole tokens on
    both sides, and the span's sampled advantage is that one token's)."""
    return {s_lo: t_lo for (s_lo, s_hi), (t_lo, _) in zip(r.spans.student, r.spans.teacher) if s_hi - s_lo == 1}

"""Each sampled token's own bytes, as the tokenizer's decoder writes them (docs/signals.md, alignment).

A cross-tokenizer alignment places every sampled token by its own bytes, so a token sequence that is
not the tokenizer's own encoding of its text (random or high-temperature samples) is placed exactly
as it was sampled. The bytes follow the decoder of the fast tokenizer (``tokenizer.json``), step by
step, on the token strings: ``ByteLevel`` (GPT-2's byte alphabet: Llama-3, Qwen, Mistral-Nemo, ...;
a token with a character outside the alphabet, an added token such as ``<think>``, is its own UTF-8),
``Metaspace`` (its first token's "▁" dropped unless ``prepend_scheme`` is ``never``), ``Replace`` of a
plain string, ``ByteFallback`` (``<0xHH>``), ``Fuse`` and ``Strip`` (Llama-2, Gemma, Mistral). A decoder
outside that list gives None: the caller then needs the canonical encoding (``io.retokenize``). The
bytes are checked by the caller against the decoder itself (``decode`` of the same ids), so a decoder
read wrongly leaves a row out; it never misplaces a token.
"""

from __future__ import annotations

import json
import re

_FALLBACK = re.compile(rb"<0x([0-9A-Fa-f]{2})>")


def byte_alphabet() -> dict[str, int]:
    """GPT-2's printable character -> byte table (the ByteLevel pre-tokenizer's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[chr(b)] = b
        else:
            out[chr(256 + extra)] = b
            extra += 1
    return out


_ALPHABET = byte_alphabet()


def _byte_level(piece: bytes) -> bytes:
    text = piece.decode("utf-8", errors="replace")
    return bytes(_ALPHABET[c] for c in text) if all(c in _ALPHABET for c in text) else piece


def _strip(piece: bytes, content: bytes, start: int, stop: int) -> bytes:
    for _ in range(start):
        piece = piece[len(content):] if piece.startswith(content) else piece
    for _ in range(stop):
        piece = piece[:-len(content)] if content and piece.endswith(content) else piece
    return piece


def _strip_fused(pieces: list[bytes], content: bytes, start: int, stop: int) -> list[bytes]:
    """``Strip`` after ``Fuse``: up to ``start`` copies of ``content`` off the text's start, ``stop`` off its end,
    taken from whichever tokens hold them."""
    out = list(pieces)
    for _ in range(start):
        k = next((i for i, p in enumerate(out) if p), None)
        if k is None or not out[k].startswith(content):
            break
        out[k] = out[k][len(content):]
    for _ in range(stop):
        k = next((i for i in range(len(out) - 1, -1, -1) if out[i]), None)
        if k is None or not content or not out[k].endswith(content):
            break
        out[k] = out[k][:-len(content)]
    return out


def _step(dec: dict, pieces: list[bytes], fused: bool) -> tuple[list[bytes], bool] | None:
    """One decoder step on the tokens' bytes, or None for a step this module does not know."""
    kind = dec.get("type")
    if kind == "Sequence":
        for sub in dec.get("decoders", []):
            done = _step(sub, pieces, fused)
            if done is None:
                return None
            pieces, fused = done
        return pieces, fused
    if kind == "ByteLevel":
        return [_byte_level(p) for p in pieces], True  # it writes one string: later steps see it fused
    if kind == "Metaspace":
        rep = dec.get("replacement", "\u2581").encode()
        scheme = dec.get("prepend_scheme", "always" if dec.get("add_prefix_space", True) else "never")
        first = b"" if scheme != "never" else b" "  # tokenizers drops every "▁" of the first token then
        return [p.replace(rep, first if i == 0 else b" ") for i, p in enumerate(pieces)], fused
    if kind == "Replace":
        pattern = dec.get("pattern", {})
        if "String" not in pattern:
            return None
        old, new = pattern["String"].encode(), dec.get("content", "").encode()
        return [p.replace(old, new) if old else p for p in pieces], fused
    if kind == "ByteFallback":
        return [bytes([int(m.group(1), 16)]) if (m := _FALLBACK.fullmatch(p)) else p for p in pieces], fused
    if kind == "Fuse":
        return pieces, True
    if kind == "Strip":
        content, start, stop = dec.get("content", " ").encode(), int(dec.get("start", 0)), int(dec.get("stop", 0))
        if fused:
            return _strip_fused(pieces, content, start, stop), fused
        return [_strip(p, content, start, stop) for p in pieces], fused
    return None


def decoder_spec(tok) -> dict | None:
    """The fast tokenizer's decoder as ``tokenizer.json`` writes it (None: no decoder, or not a fast tokenizer)."""
    decoder = getattr(getattr(tok, "backend_tokenizer", None), "decoder", None)
    return None if decoder is None else json.loads(decoder.__getstate__())  # the decoder alone, not the vocabulary


def token_bytes(tok, ids: list[int], spec: dict | None = None) -> list[bytes] | None:
    """The bytes each token of ``ids`` adds to their decoded text (in order; their join is the text's
    UTF-8 when valid), or None when the tokenizer's decoder is not one this module reads.
    ``spec``: ``decoder_spec(tok)``, when the caller has it already."""
    spec = decoder_spec(tok) if spec is None else spec
    if not spec:
        return None
    done = _step(spec, [t.encode() for t in tok.convert_ids_to_tokens(list(ids))], False)
    return None if done is None else done[0]

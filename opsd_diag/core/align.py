"""Common spans of two tokenisations of one text: the unit a cross-tokenizer teacher is compared on.

Pure and torch-free (docs/signals.md, "Teachers with another tokenizer"). The student's completion
is decoded once to text and re-tokenised by the teacher; both token sequences come with character
offsets (``offset_mapping`` of a fast tokenizer, ``(start, end)`` per token). A *common span* is a
stretch of text that both tokenisations cover with whole tokens: its boundaries are the character
positions where both have a token boundary. The spans returned are the smallest such ones.

A token boundary between token i and i+1 is trusted only when the offsets touch exactly
(``end_i == start_{i+1}``). Overlapping offsets (byte-level fragments of one multi-byte character
map to the same character) and gaps (offsets trimmed of whitespace, which then belongs to neither
token) give no boundary there, so such tokens merge into a larger span: coarser, never misaligned.
Whether each span's tokens really decode to its text is checked by the caller
(``opsd_diag.io.retokenize``), which flags rows that fail and leaves them out.

The student's offsets are not read from a re-encoding: its sampled tokens need not be its
tokenizer's own encoding of their text. Each sampled token is placed by its own bytes
(``byte_prefix``, ``char_offsets``): the characters its bytes touch, so fragments of one character
overlap like a fast tokenizer's offsets and give no cut inside it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spans:
    """Common spans, in text order: span j is ``student[j]`` = token indices [lo, hi) of the student,
    ``teacher[j]`` the teacher's, ``chars[j]`` = the characters [a, b) of the text both cover."""
    student: tuple[tuple[int, int], ...]
    teacher: tuple[tuple[int, int], ...]
    chars: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.chars)

    def student_index(self) -> list[int]:
        """For each student token, the index of its span (``[N_s]``)."""
        return [j for j, (lo, hi) in enumerate(self.student) for _ in range(lo, hi)]

    def teacher_index(self) -> list[int]:
        """For each teacher token, the index of its span (``[N_t]``)."""
        return [j for j, (lo, hi) in enumerate(self.teacher) for _ in range(lo, hi)]


def check_offsets(offsets: list[tuple[int, int]], n_chars: int, who: str) -> None:
    """Offsets must be in order and inside the text: anything else is not a tokenisation of it."""
    last_start, last_end = 0, 0
    for i, (a, b) in enumerate(offsets):
        if not (0 <= a <= b <= n_chars) or a < last_start or b < last_end:
            raise ValueError(f"{who} offsets are not an ordered tiling of the text at token {i}: {(a, b)}")
        last_start, last_end = a, b


def boundaries(offsets: list[tuple[int, int]], n_chars: int) -> dict[int, int]:
    """Character position -> token index k for every trusted cut "before token k" (0 and the text end
    always, with k = 0 and k = number of tokens). A character position claimed by two cuts (a token
    with empty offsets) is ambiguous and dropped."""
    cuts: dict[int, int] = {0: 0, n_chars: len(offsets)}
    seen: dict[int, int] = {}
    for k in range(1, len(offsets)):
        end_prev, start = offsets[k - 1][1], offsets[k][0]
        if end_prev == start and 0 < start < n_chars:
            seen[start] = seen.get(start, 0) + 1
            cuts[start] = k
    for c, count in seen.items():
        if count > 1:
            del cuts[c]
    return cuts


def common_spans(student_offsets: list[tuple[int, int]], teacher_offsets: list[tuple[int, int]],
                 n_chars: int) -> Spans:
    """The smallest spans that both tokenisations cover with whole tokens (see the module docstring).

    Every token of each side lands in exactly one span, and every span holds at least one token of
    each side (a text of 0 characters has no spans). Raises ``ValueError`` for offsets that are not
    an ordered tiling of the text.
    """
    check_offsets(student_offsets, n_chars, "student")
    check_offsets(teacher_offsets, n_chars, "teacher")
    if n_chars == 0 or not student_offsets or not teacher_offsets:
        if student_offsets or teacher_offsets:
            raise ValueError("one side has tokens for an empty text, or none for a non-empty one")
        return Spans((), (), ())
    s_cuts, t_cuts = boundaries(student_offsets, n_chars), boundaries(teacher_offsets, n_chars)
    cuts = sorted(set(s_cuts) & set(t_cuts))  # starts with 0, ends with n_chars
    student, teacher, chars = [], [], []
    for a, b in zip(cuts, cuts[1:]):
        student.append((s_cuts[a], s_cuts[b]))
        teacher.append((t_cuts[a], t_cuts[b]))
        chars.append((a, b))
    return Spans(tuple(student), tuple(teacher), tuple(chars))


def byte_prefix(pieces: list[bytes]) -> int:
    """How many leading tokens round-trip at the byte level: the most whole tokens whose bytes, joined,
    are valid UTF-8 that ends on a character boundary (a token holding half a character that the next
    token does not complete, or a byte that is not UTF-8, ends it)."""
    data = b"".join(pieces)
    try:
        data.decode("utf-8")
        good = len(data)
    except UnicodeDecodeError as e:
        good = e.start  # data[:good] is valid; it may still end inside a character a token cut
    keep, pos = 0, 0
    for k, piece in enumerate(pieces):
        pos += len(piece)
        if pos > good:
            break
        if pos == good or data[pos] & 0xC0 != 0x80:  # the next byte starts a character
            keep = k + 1
    return keep


def char_offsets(pieces: list[bytes]) -> tuple[str, list[tuple[int, int]]]:
    """(the text the pieces spell, each piece's character span ``(a, b)``): the characters its bytes
    touch, so the fragments of one character share it. A piece of no bytes is ``(c, c)`` at a character
    start, else it shares the character it sits in. ``pieces`` must join to valid UTF-8 (``byte_prefix``)."""
    text = b"".join(pieces).decode("utf-8")
    char_of = []  # [n_bytes + 1]: the character each byte belongs to; the end is len(text)
    for i, ch in enumerate(text):
        char_of += [i] * len(ch.encode("utf-8"))
    char_of.append(len(text))
    out, pos = [], 0
    for piece in pieces:
        end = pos + len(piece)
        if piece:
            out.append((char_of[pos], char_of[end - 1] + 1))
        else:
            inside = 0 < pos < len(char_of) - 1 and char_of[pos - 1] == char_of[pos]
            out.append((char_of[pos], char_of[pos] + inside))
        pos = end
    return text, out

"""A chat template rendered as data: transformers' own ``apply_chat_template``, a fixed day, failures in one line.

- The options a user passes (``chat_template_kwargs``) are plain values the template reads; what the
  tool decides itself (``add_generation_prompt``, ``tokenize``, ``tools``, ...) is refused in the
  config (``config.model_options.RESERVED_TEMPLATE_OPTIONS``).
- The day: transformers gives templates ``strftime_now`` (today's date, so a prompt would change from
  day to day and a resumed run could mix two days). Every template that names it is rendered with a
  ``strftime_now`` of a fixed day instead: 26 Jul 2024 (what Llama-3.1's template writes), or the
  day of the user's ``date_string`` when it reads as a date. Inside the sandbox a template reaches
  the clock only through that name, so no path is left to today's date.
- A template that raises (``raise_exception``, a type error), recurses without end or hits the
  sandbox's limits (an unsafe attribute, a range over 100,000 items) is one ``OpsdError`` line
  naming the model, the prompt and the fix.
"""

from __future__ import annotations

import json
from datetime import datetime

from opsd_diag.errors import OpsdError
from opsd_diag.io.load_errors import first_sentence

FIXED_DATE = "26 Jul 2024"
_FIXED_DAY = datetime.strptime(FIXED_DATE, "%d %b %Y")
_DATE_FORMATS = ("%d %b %Y", "%d %B %Y", "%Y-%m-%d", "%b %d %Y", "%B %d %Y", "%B %d, %Y", "%d/%m/%Y")
_DIRECTIVES = "aAwdbBmyYHIpMSfzZjUWcxXGuVCDeFgkln"


def template_day(kwargs: dict) -> datetime:
    """The day a template's ``strftime_now`` tells: the user's ``date_string`` when it reads as a date, else
    the fixed day."""
    given = kwargs.get("date_string")
    for fmt in _DATE_FORMATS if isinstance(given, str) else ():
        try:
            return datetime.strptime(given.strip(), fmt)
        except ValueError:
            continue
    return _FIXED_DAY


def _table(day: datetime) -> dict[str, str]:
    """Every strftime directive on ``day`` at midnight (``-d``: glibc's unpadded form), and ``%%``."""
    out = {"%": "%"}
    for c in _DIRECTIVES:
        try:
            value = day.strftime("%" + c)
        except ValueError:  # a directive this platform lacks
            continue
        out[c] = value
        out["-" + c] = value.lstrip("0") or "0" if value.isdigit() else value
    return out


def fixed_day_template(template: str, day: datetime) -> str:
    """``template`` with ``strftime_now`` defined first as a macro that formats ``day`` (shadowing transformers'
    clock). The trailing newline after the macro is the one ``trim_blocks`` removes, so the template's own
    text renders unchanged."""
    macro = ("{%- macro strftime_now(format) -%}{%- set table = " + json.dumps(_table(day)) + " -%}"
             "{%- set ns = namespace(out='', pct=false, flag='') -%}{%- for ch in format -%}"
             "{%- if ns.pct and ch == '-' and not ns.flag -%}{%- set ns.flag = '-' -%}"
             "{%- elif ns.pct -%}{%- set ns.out = ns.out ~ table.get(ns.flag ~ ch, '%' ~ ns.flag ~ ch) -%}"
             "{%- set ns.pct = false -%}{%- set ns.flag = '' -%}"
             "{%- elif ch == '%' -%}{%- set ns.pct = true -%}{%- else -%}{%- set ns.out = ns.out ~ ch -%}{%- endif -%}"
             "{%- endfor -%}{{- ns.out -}}{%- endmacro %}\n")
    return macro + template


def reads_the_clock(template: str | None) -> bool:
    return bool(template) and "strftime_now" in template


def _why(e: BaseException, where: str, shift: int = 0) -> tuple[str, str]:
    """(what the template did on ``where``, the fix) for an exception raised while it rendered (``shift``: lines
    put in front of the template's own)."""
    from jinja2 import TemplateError, TemplateSyntaxError
    from jinja2.exceptions import SecurityError

    fix = "fix the template (the model's chat_template.jinja or tokenizer_config.json) or its chat_template_kwargs"
    if isinstance(e, RecursionError):
        return f"recurses without end (a macro that calls itself) on {where}", fix
    if isinstance(e, SecurityError):
        return f"breaks the template sandbox's rules ({first_sentence(str(e))}) on {where}", fix
    if isinstance(e, OverflowError) and "range" in str(e).lower():
        return f"asks for a range beyond the template sandbox's limit (100,000 items) on {where}", fix
    if isinstance(e, MemoryError):
        return f"builds more text than fits in memory on {where}", fix
    if isinstance(e, TemplateSyntaxError):
        return f"has a syntax error at line {(e.lineno or 0) - shift} ({first_sentence(e.message or '')})", fix
    msg = first_sentence(str(e)) or type(e).__name__
    if type(e) is TemplateError:  # the template's own raise_exception
        if "system" in msg.lower():
            return (f"refuses {where}: {msg!r}", "this template takes no system prompt: remove data.system_prompt "
                                                 "and the teachers' system_prompt")
        return f"refuses {where}: {msg!r}", "check the prompt's messages and chat_template_kwargs"
    return f"fails ({type(e).__name__}: {msg}) on {where}", fix


def render(tok, messages: list[dict], kwargs: dict, who: str, where: str = "the prompt") -> str:
    """The chat template's text of ``messages`` with the generation prompt (``kwargs``: the user's options)."""
    options, shift = dict(kwargs), 0
    try:
        template = tok.get_chat_template()
        if reads_the_clock(template):
            options["chat_template"], shift = fixed_day_template(template, template_day(kwargs)), 1
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **options)
    except Exception as e:  # noqa: BLE001 - a user's template is code: whatever it raises is its failure
        what, fix = _why(e, where or "the prompt", shift)
        raise OpsdError(f"the chat template of {who} {what}: {fix}") from None


def has_chat_template(tok) -> bool:
    return bool(getattr(tok, "chat_template", None))

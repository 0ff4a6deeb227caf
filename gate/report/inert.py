"""One escaping function per medium, so that no string from a file, an engine, a server, a baseline or a
prompt can do anything on the page that shows it.

* Markdown (the PR comment and the step summary, both GitHub-flavoured Markdown): :func:`markdown` for a
  sentence, :func:`code` for a quoted value (model output, prompts, ids).  HTML, comments and markers
  (``<!--``), images and links (``![x](…)``, ``[x](…)``), bare URLs, mentions (``@everyone``), issue
  references (``#1``), table cells (``|``), code spans and line breaks all come out as plain text.
* The terminal (rich): :func:`terminal` gives a ``rich.text.Text``, never parsed as markup (``[/]``), with
  control characters (ANSI escapes) shown as ``·``.

The one Jinja environment (:func:`gate.report.render.environment`) applies :func:`markdown` to every ``{{ … }}`` by
default (:func:`finalize`); only values already made :class:`Inert` here pass unchanged.
"""

from __future__ import annotations

import html
import re

ZWSP = "\u200b"
_SPACE = re.compile(r"\s+")  # a run of whitespace, newlines included, is one space: nothing starts a new block
_URL = re.compile(r"(?i)(?<=[a-z])(://)|(www)\.")  # every www., not only at a word start


class Inert(str):
    """Text already made inert for Markdown: the template layer leaves it as it is."""


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else ("⏎" if ch == "\n" else "·") for ch in text)


def _neutral(text: str, quote: bool = False) -> str:
    """Markdown-inert, HTML-escaped text (no newlines: the caller decides what they become)."""
    text = html.escape(text, quote=quote)
    text = text.replace("@", "@" + ZWSP).replace("#", "#" + ZWSP)
    text = _URL.sub(lambda m: (ZWSP + m.group(1)) if m.group(1) else (m.group(2) + ZWSP + "."), text)
    for ch, entity in (("|", "&#124;"), ("`", "&#96;"), ("[", "&#91;"), ("]", "&#93;"), ("\\", "&#92;")):
        text = text.replace(ch, entity)
    return text


def markdown(value) -> Inert:
    """A sentence that may quote user-controlled text, inert in Markdown, tables and HTML; one line."""
    if isinstance(value, Inert):
        return value
    return Inert(_neutral(_printable(_SPACE.sub(" ", str(value)))))


def code(value, limit: int = 80) -> Inert:
    """A quoted value (model output, a prompt, an id) in an inert ``<code>`` span, cut to ``limit``."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    text = _neutral(_printable(text), quote=True)
    return Inert(f"<code>{text}</code>" if text.strip() else "<code>␣</code>")


def finalize(value) -> str:
    """Jinja's ``finalize``: every ``{{ … }}`` of a Markdown template is escaped unless it is already inert."""
    if isinstance(value, Inert):
        return value
    return markdown(value)


def terminal(value, style: str = ""):
    """A ``rich`` Text: never parsed as console markup, with control characters made visible."""
    from rich.text import Text

    return Text(_printable(str(value)), style=style)

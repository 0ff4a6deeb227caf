"""A page made of sections, and the one routine that bounds it: the PR comment (65,536 characters, GitHub's
limit for an issue comment), the step summary (1 MiB per step, counted in UTF-8 bytes) and any body the
publisher posts.

The least important sections are dropped first, and a note says which.  Sections of priority :data:`KEEP`
(the headline, the footer with its hidden marker, a body posted as it is) are never dropped; when they alone are
too long, the text is cut, never inside an HTML comment or leaving a code block open, and the note and the footer
still follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

COMMENT_LIMIT = 65_536  # characters: GitHub refuses a longer issue comment
SUMMARY_LIMIT = 1_000_000  # bytes: GitHub's step summary takes at most 1 MiB per step
KEEP = 100  # a section of this priority is never dropped
FOOTER = "footer"  # the section that stays last, after the note
_FENCE_CLOSE = "\n```\n"


@dataclass
class Section:
    name: str
    text: str
    priority: int  # higher survives longer when the page must be cut


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def fit(sections: list[Section], limit: int, size: Callable[[str], int] = len) -> str:
    """Join the sections, dropping the least important ones until ``size(page) <= limit``, and say so."""
    kept = list(sections)
    dropped: list[str] = []
    while True:
        body, footer = _split(kept)
        text = body + _note(limit, dropped, size) + footer
        if size(text) <= limit:
            return text
        droppable = [s for s in kept if s.priority < KEEP]
        if not droppable:
            return _cut(body, footer, dropped, limit, size)
        victim = min(droppable, key=lambda s: s.priority)
        kept.remove(victim)
        dropped.append(victim.name)


def _split(sections: list[Section]) -> tuple[str, str]:
    return ("".join(s.text for s in sections if s.name != FOOTER),
            "".join(s.text for s in sections if s.name == FOOTER))


def _note(limit: int, dropped: list[str], size: Callable[[str], int]) -> str:
    if not dropped:
        return ""
    unit = "characters" if size is len else "bytes"  # the comment counts characters; the step summary, bytes
    return (f"\n> Cut to fit {limit:,} {unit}: {', '.join(dropped)} left out. The full report is in the job's "
            "step summary and the `specguard-report` artifact.\n")


def _cut(body: str, footer: str, dropped: list[str], limit: int, size: Callable[[str], int]) -> str:
    """The last resort, when what is never dropped is too long alone: cut the body, then the note and the footer."""
    note = _note(limit, [*dropped, "the rest of the page"], size)
    room = limit - size(note) - size(footer) - size(_FENCE_CLOSE)
    if room <= 0:  # not even the note fits: a plain cut
        return _clip(body + footer, limit, size)
    kept = _clip(body, room, size)
    opened = kept.rfind("<!--")
    if opened > kept.rfind("-->"):  # an HTML comment cut open would hide the note, up to the marker's "-->"
        kept = kept[:opened]
    if sum(1 for line in kept.splitlines() if line.lstrip().startswith("```")) % 2:  # it would swallow the note
        kept += _FENCE_CLOSE
    return kept + note + footer


def _clip(text: str, limit: int, size: Callable[[str], int]) -> str:
    """At most ``limit`` by ``size``, never cut mid-character."""
    if size(text) <= limit:
        return text
    if size is len:
        return text[:limit]
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


@dataclass
class Page:
    sections: list[Section] = field(default_factory=list)

    def render(self, limit: int, size: Callable[[str], int] = len) -> str:
        return fit(self.sections, limit, size)


__all__ = ["COMMENT_LIMIT", "KEEP", "SUMMARY_LIMIT", "Page", "Section", "fit", "utf8_size"]


def comment_marker(name: str) -> str:
    """The hidden marker that identifies one config's comment on a PR: the page ends with it, and the publisher
    finds the comment to edit by it.  ``name`` is the config's baseline name, cut to [A-Za-z0-9_.-]."""
    import re

    return f"<!-- specguard:{re.sub(r'[^A-Za-z0-9_.-]', '-', str(name))[:64] or 'specguard'} -->"

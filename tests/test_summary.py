"""The report's text: untrusted text (model output, prompt ids) is inert, and every bounded page is bounded by
one routine (``gate.report.page.fit``), exactly at its limit."""

from __future__ import annotations

import pytest

from gate.ci.github import prepare_body
from gate.report.page import COMMENT_LIMIT, KEEP, Page, Section, fit, utf8_size
from gate.report.render import render_comment, render_summary, untrusted

MARKER = "<!-- specguard:demo -->"


def test_untrusted_text_cannot_escape():
    evil = "</code><img src=x onerror=alert(1)> | @admin `rm -rf` [link](http://x)\n$(whoami)"
    out = untrusted(evil, limit=500)
    assert out.startswith("<code>") and out.endswith("</code>")
    inner = out[len("<code>"):-len("</code>")]
    for bad in ("<", ">", "|", "`", "[", "]", "\n"):
        assert bad not in inner
    assert "@\u200badmin" in inner  # no @-mention
    assert "⏎" in inner


def test_untrusted_truncates_and_marks_blank():
    assert untrusted("x" * 200, limit=10) == "<code>" + "x" * 10 + "…</code>"
    assert untrusted("  ") == "<code>␣</code>"


def _page(fill: int) -> Page:
    """A comment-like page whose sections together are exactly ``fill`` characters longer than its fixed part."""
    head, foot = "## ✅ specguard: PASS\n", f"\n{MARKER}\n"
    return Page([Section("headline", head, KEEP), Section("speedup", "s" * (fill // 2), 75),
                 Section("examples", "e" * (fill - fill // 2), 20), Section("footer", foot, KEEP)])


def test_a_comment_of_exactly_the_limit_is_kept_whole_and_one_more_character_is_cut_to_fit():
    page = _page(COMMENT_LIMIT - len("## ✅ specguard: PASS\n") - len(f"\n{MARKER}\n"))
    whole = "".join(s.text for s in page.sections)
    assert len(whole) == COMMENT_LIMIT
    assert render_comment(page) == whole  # exactly the limit: nothing dropped, no note
    page.sections[1].text += "s"  # the limit + 1
    cut = render_comment(page)
    assert len(cut) <= COMMENT_LIMIT and "s" * 10 in cut and "e" * 10 not in cut
    assert "Cut to fit 65,536 characters: examples left out" in cut and cut.endswith(f"\n{MARKER}\n")


def test_a_step_summary_of_exactly_the_limit_in_bytes_is_kept_whole_and_one_more_byte_is_cut_to_fit():
    page = Page([Section("headline", "## ✅ specguard: PASS\n", KEEP), Section("speedup", "é ✓\n" * 300, 75),
                 Section("footer", f"\n{MARKER}\n", KEEP)])
    details = "détail ✓\n" * 100
    limit = utf8_size(render_summary(page, details=details, limit=10**9))
    assert limit > len(render_summary(page, details=details, limit=10**9))  # multi-byte: bytes, not characters
    whole = render_summary(page, details=details, limit=limit)
    assert utf8_size(whole) == limit and "## Details" in whole and "left out" not in whole
    cut = render_summary(page, details=details, limit=limit - 1)  # the page is one byte over this limit
    assert utf8_size(cut) <= limit - 1 and "## Details" not in cut and "é ✓" in cut
    assert "details left out" in cut and cut.endswith(f"\n{MARKER}\n")
    assert f"Cut to fit {limit - 1:,} bytes: details left out" in cut, "the note counts what the limit counts"


@pytest.mark.parametrize("size", [len, utf8_size])
def test_what_is_never_dropped_is_cut_at_the_boundary_with_the_note_and_the_footer(size):
    footer = Section("footer", f"\n{MARKER}\n", KEEP)
    fixed = size(footer.text)
    body = Section("comment", "ü" * 1000, KEEP)
    limit = size(body.text) + fixed
    assert fit([body, footer], limit, size) == body.text + footer.text
    cut = fit([body, footer], limit - 1, size)
    assert size(cut) <= limit - 1 and cut.startswith("ü" * 100) and cut.endswith(footer.text)
    assert "the rest of the page left out" in cut
    assert "\ufffd" not in cut  # never mid-character: a byte cut decoded with errors="replace" would leave one


def test_a_posted_body_is_bounded_by_the_same_routine_at_the_exact_limit():
    tail = f"\n\n{MARKER}\n"
    exact = "x" * (COMMENT_LIMIT - len(tail))
    assert prepare_body(exact, MARKER) == exact + tail  # exactly the limit once the marker is on: whole
    over = prepare_body(exact + "x", MARKER)
    assert len(over) <= COMMENT_LIMIT and over.endswith(f"{MARKER}\n")
    assert "Cut to fit 65,536 characters: the rest of the page left out" in over


def test_a_change_that_rounds_to_nothing_is_never_shown_as_minus_zero():
    from gate.numbers import MISSING, signed_pct

    assert [signed_pct(v) for v in (-0.001, -0.0049, 0.0, 0.001, -0.12, 0.3)] == ["+0%", "+0%", "+0%", "+0%",
                                                                                  "-12%", "+30%"]
    assert [signed_pct(v, "+.1%") for v in (-0.0004, -0.0006, None)] == ["+0.0%", "-0.1%", MISSING]

"""Untrusted text (model output, prompt ids) is inert in the summary."""

from __future__ import annotations

from gate.report import untrusted


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

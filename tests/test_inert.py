"""Inert by construction: whatever a file, an engine, a server, a baseline or a prompt says, the PR comment,
the step summary and the terminal show it as text (one escaping function per medium, applied by the template
layer by default)."""

from __future__ import annotations

import io
import re

import pytest
import synthetic as syn
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gate.checks.doc import VerdictLine
from gate.report.inert import code, markdown
from gate.report.render import build_page, marker, print_terminal, render_comment, render_summary, render_text
from gate.run.results import Results

FRAGMENTS = ["<!-- specguard:OTHER -->", "![x](https://evil.example/p.png)", "[click](http://evil.example)",
             "@everyone", "@org/team", "#1", "<img src=x onerror=alert(1)>", "</details>", "</summary>", "</code>",
             "|", "`", "```", "\n# heading\n", "\n\n---\n", "[/]", "[bold red]x[/bold red]", "\x1b[31m",
             "\x1b]8;;x\x07",
             "::error::pwned", "\n::notice::x", "www.evil.example", "https://evil.example", "\\", "&amp;", "<!--",
             "-->", "<script>", "\r\n|x|y|", "\u2028", "\x00", "{{ 7*7 }}", "{% raw %}", "%s", "\udcff"]
HOSTILE = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), min_size=1, max_size=6).map("".join)
ALLOWED_TAGS = {"<details>", "</details>", "<summary>", "</summary>", "<code>", "</code>", "<sub>", "</sub>"}


def _baseline(results, name="demo", created="2026-11-01T00:00:00Z", hardware_key=None):
    doc = syn.baseline_of(results, syn.checks_for(results), syn.config())
    return doc.model_copy(update={"name": name, "created_utc": created, "source": {},
                                  "hardware_key": hardware_key or doc.hardware_key})


def _hostile_run(h: str):
    """Results, checks and a baseline with ``h`` in every field that reaches a page."""
    r = syn.run(prompt_ids=("code-0", h[:200] or "p", "prose-0", "prose-1"))
    base = _baseline(r, name=h, created=h, hardware_key=h)
    doc = r.model_dump(mode="json", by_alias=True)
    doc["fingerprint"]["hardware"]["cpu"] = h
    doc["fingerprint"]["libraries"] = {"torch": h, "transformers": h, "specguard": h}
    doc["fingerprint"]["config"] = h
    doc["fingerprint"]["suite"]["fingerprint"] = h
    for m in doc["fingerprint"]["models"].values():
        m["fingerprint"] = h
    doc["status"] = "interrupted"
    doc["stopped_at"] = {"reason": h, "phase": h, "engine": h, "batch_size": 4}
    r = Results.model_validate(doc)
    examples = [{"prompt_id": h, "position": 1, "kind": "confident", "gap": 3.0, "tolerance": 1e-5,
                 "before": h, "got": h, "reference": h}]
    checks = syn.checks_for(r, confident={4: 1}, examples=examples)
    checks.tolerance.rule = h
    checks.verdicts.append(VerdictLine(check=h, engine=h, batch_size=None, status="fail", why=h))
    checks.verdicts.append(VerdictLine(check="engine_failure", engine="speculative", batch_size=4, status="fail",
                                       why=f"speculative crashed: RuntimeError: {h}"))
    return r, checks, base


def _pages(h: str) -> tuple[str, str, str]:
    r, checks, base = _hostile_run(h)
    v = syn.judge(r, checks, syn.config(), baseline=base, baseline_path=h, same_hardware=False)
    page = build_page(r, checks, v, base, "demo")
    out = io.StringIO()
    from rich.console import Console

    print_terminal(v, Console(file=out, width=160, force_terminal=True, color_system=None))
    return render_comment(page), render_summary(page) + render_text(r, checks), out.getvalue()


def _shape(text: str) -> list[int]:
    """The page's structure: per line, how many table separators it has."""
    return [line.count("|") for line in text.split("\n")]


def _assert_inert(text: str) -> None:
    assert text.count("<!--") == 1 and text.rstrip().endswith(marker("demo")), "one marker: the config's"
    for tag in re.findall(r"<[^ >]*>?", text.replace(marker("demo"), "")):
        assert tag in ALLOWED_TAGS, f"live HTML {tag!r}"
    assert "](" not in text and "![" not in text, "no Markdown link or image"
    assert not re.search(r"@\w", text), "no @-mention"
    assert not re.search(r"(?<!&)#\d", text), "no issue reference"
    assert not re.search(r"(?i)https?://|www\.", text), "no bare URL that GitHub would link"
    assert not any(line.startswith("::") for line in text.split("\n")), "no workflow command"


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
@example("@everyonewww.evil.example")  # found by the fuzzer: the mention's escape left www. inside a word
def test_hostile_strings_in_every_rendered_field_stay_inert(h):
    comment, summary, term = _pages(h)
    benign_comment, benign_summary, _ = _pages("x")
    _assert_inert(comment)
    assert _shape(comment) == _shape(benign_comment), "a hostile string changed the comment's lines or cells"
    assert _shape(summary) == _shape(benign_summary), "a hostile string changed the summary's lines or cells"
    assert "<!--" not in summary.replace(marker("demo"), "")
    assert "](" not in summary and not re.search(r"@\w", summary)
    assert "\x1b" not in term and "specguard: FAIL" in term


def test_a_baseline_cannot_forge_the_marker_or_reach_the_comment_live():
    """Bug (item 3): a baseline's name and created_utc were rendered raw, and publish picked the forged
    marker, so the upsert edited another config's comment."""
    r = syn.run()
    forged = "<!-- specguard:OTHER --> @everyone <img src=x>"
    base = _baseline(r, name=forged, created=forged)
    v = syn.judge(r, syn.checks_for(r), syn.config(), baseline=base, baseline_path="b.json")
    comment = render_comment(build_page(r, syn.checks_for(r), v, base, "demo"))
    assert "specguard:OTHER -->" not in comment.replace("&lt;!-- specguard:OTHER --&gt;", "")
    assert re.findall(r"<!-- specguard:[^>]* -->", comment) == ["<!-- specguard:demo -->"]
    assert comment.rstrip().endswith("<!-- specguard:demo -->"), "the publisher finds a comment by its last line"
    assert "@everyone" not in comment and "<img" not in comment


def test_images_links_and_markers_in_a_quoted_id_are_text():
    """Bug (item 3): inline() left Markdown images and links live."""
    for f in (markdown, code):
        out = f("![x](https://evil.example/p.png) [a](b) <!-- specguard:x --> @everyone www.x.org")
        assert "](" not in out and "<!--" not in out and "@everyone" not in out and "www." not in out
        assert "https://" not in out


def test_rich_markup_in_a_message_cannot_crash_the_terminal_report():
    """Bug (item 8): a message containing `[/]` raised MarkupError after verdict.json was written."""
    r = syn.run()
    checks = syn.checks_for(r)
    checks.verdicts.append(VerdictLine(check="engine_failure", engine="x[/]", batch_size=4, status="fail",
                                       why="closing tag [/] and [bold]markup[/bold] and \x1b[31mred"))
    v = syn.judge(r, checks, syn.config())
    from rich.console import Console

    out = io.StringIO()
    print_terminal(v, Console(file=out, width=300, color_system=None))
    text = out.getvalue()
    assert "closing tag [/] and [bold]markup[/bold]" in text and "x[/]" in text and "\x1b" not in text

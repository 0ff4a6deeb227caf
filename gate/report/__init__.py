"""The page a reviewer reads: one data model, three renderings (PR comment, step summary, terminal) and a chart.

* ``comment.md`` — the PR comment: a headline, what changed, equivalence,
  reproducibility and speedup as separate sections with base / head / delta
  tables, a Mermaid chart, collapsed divergence examples, and a footer with the
  fingerprint and the hidden marker that identifies the config.  At most 65,536
  characters (GitHub's limit): the least important sections are dropped first,
  with a note (:func:`gate.report.page.fit`, the one truncation routine).
* ``summary.md``, the step summary — the same page with a 1 MiB limit, then the checks' full text (``checks.md`` of
  ``specguard check``, :func:`gate.report.render.render_text`, less its title:
  :func:`gate.report.render.render_details`) as its least important section.
* the terminal — rich tables; plain text when stdout is not a terminal.
* ``speedup.png`` — speedup against load per slice with CI bars, when the
  ``specguard[plot]`` extra (matplotlib) is installed; otherwise skipped with a note.

One Jinja environment renders every template, and one set of formatters (:mod:`gate.numbers`) writes
every number.  Every ``{{ }}`` in the templates is escaped for Markdown by default
(:func:`gate.report.inert.finalize`), so
nothing from a file, an engine, a server, a baseline or a prompt can break a table, close a
``<details>``, @-mention someone, link an issue, show an image or forge a marker.  Model output,
prompts and prompt ids are quoted in inert code spans (``untrusted``).  The only marker in the page is
the footer's, made from the config's name (:func:`gate.report.render.marker`), never from a baseline.

"""

"""``specguard suite import``: a prompt suite from a sample of real requests.

Production traffic is chat-formatted, long-tailed in length and full of repeats; a suite written by hand is none
of those.  The importer reads a JSONL file of requests and writes a suite that keeps their shape:

* a request is ``{"prompt": "..."}`` or ``{"messages": [...]}`` (OpenAI's chat format), either at the top level
  or under ``body`` (OpenAI's batch-file lines); every other field (model, temperature, ...) is ignored;
* its slice is the value of ``--slice-field`` (default ``slice``), made into a slice name (``[A-Za-z0-9_.-]``),
  or ``default`` where the request has none;
* exact duplicates (the same prompt, or the same messages) are kept once;
* per slice, the rows are sorted by length and cut into ``LENGTH_BANDS`` bands of equal count, and the kept rows
  are drawn from every band in turn (seeded), so a slice of ``--per-slice`` rows spans short to long requests
  as the sample did; ``--max-rows`` caps the whole suite;
* the written suite is read back through the suite parser, so it is valid by construction, or the import fails.

Hostile input gets a clear error and exit 2, naming the file and the line: a file over ``--max-bytes``, a line
over ``MAX_LINE_BYTES``, invalid JSON, a request with neither ``prompt`` nor ``messages``, a malformed message.
Up to ``MAX_REPORTED`` problems are listed, then a count of the rest.  Nothing is written unless the import
succeeds.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from gate.errors import Problem, SuiteError
from gate.inputs.suite import CHAT_ROLES, MAX_MESSAGES, parse_suite
from gate.io.files import atomic_write_text, loads_json

MAX_LINE_BYTES = 4 << 20  # one request; a longer line is refused rather than held in memory
MAX_REPORTED = 20
LENGTH_BANDS = 4
DEFAULT_SLICE = "default"
HINT = ("one JSON object per line, with 'prompt' (a string) or 'messages' (a list of {role, content}), at the top "
        "level or under 'body'")


@dataclass
class ImportReport:
    source: str
    out: str
    read: int = 0
    duplicates: int = 0
    kept: dict[str, int] = field(default_factory=dict)  # slice -> rows written
    available: dict[str, int] = field(default_factory=dict)  # slice -> distinct rows in the sample
    renamed: dict[str, str] = field(default_factory=dict)  # tag -> slice name, where they differ

    def lines(self) -> list[str]:
        out = [f"read {self.read} requests from {self.source}; {self.duplicates} duplicates dropped",
               f"wrote {sum(self.kept.values())} prompts in {len(self.kept)} slices to {self.out}:"]
        out += [f"  {s}: {self.kept[s]} of {self.available[s]}" for s in sorted(self.kept)]
        out += [f"  tag {t!r} is slice {s!r}" for t, s in sorted(self.renamed.items())]
        return out


def _slice_name(tag) -> str:
    if tag is None or (isinstance(tag, str) and not tag.strip()):
        return DEFAULT_SLICE
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(tag)).strip("-")[:100]
    return name or DEFAULT_SLICE


def _row(obj, n: int, source: str, slice_field: str) -> tuple[str, dict] | Problem:
    """(slice tag, the suite row's content) of one request, or the problem with it."""
    if not isinstance(obj, dict):
        return Problem(source, f"expected a JSON object, got {type(obj).__name__}", line=n, hint=HINT)
    tag = obj.get(slice_field)
    body = obj["body"] if isinstance(obj.get("body"), dict) and "prompt" not in obj and "messages" not in obj \
        else obj
    if tag is None:
        tag = body.get(slice_field)
    if ("prompt" in body) == ("messages" in body):
        return Problem(source, "expected 'prompt' or 'messages', " + ("got both" if "prompt" in body else
                                                                     "got neither"), line=n, hint=HINT)
    if "prompt" in body:
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]  # OpenAI's completions take a list of prompts; one is one request
        if not isinstance(prompt, str) or not prompt.strip():
            return Problem(source, "expected 'prompt' to be a non-empty string", field="prompt", line=n, hint=HINT)
        return tag, {"prompt": prompt}
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return Problem(source, "expected 'messages' to be a non-empty list", field="messages", line=n, hint=HINT)
    if len(messages) > MAX_MESSAGES:
        return Problem(source, f"{len(messages)} messages, more than a suite row takes ({MAX_MESSAGES})",
                       field="messages", line=n, hint="leave the conversation out, or cut it to its last turns")
    kept = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            return Problem(source, f"expected a role of {', '.join(CHAT_ROLES)}", field=f"messages[{i}].role",
                           line=n, hint=HINT)
        content = m.get("content")
        if isinstance(content, list):  # content parts: the text ones are kept, in order; images are not gated
            texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
                return Problem(source, "content parts other than text (images, audio) cannot be gated",
                               field=f"messages[{i}].content", line=n, hint="sample text-only requests")
            content = "".join(texts)
        if not isinstance(content, str):
            return Problem(source, "expected the message's content as a string", field=f"messages[{i}].content",
                           line=n, hint=HINT)
        kept.append({"role": m["role"], "content": content})
    if not any(m["content"].strip() for m in kept):
        return Problem(source, "expected at least one message with text", field="messages", line=n, hint=HINT)
    return tag, {"messages": kept}


def _length(row: dict) -> int:
    return len(row["prompt"]) if "prompt" in row else sum(len(m["content"]) for m in row["messages"])


def _stratified(rows: list[dict], k: int, rnd: random.Random) -> list[dict]:
    """``k`` of ``rows`` spread over their length bands: each band shuffled, then one from each band in turn."""
    if len(rows) <= k:
        return rows
    ordered = sorted(rows, key=_length)
    bands = [ordered[i * len(ordered) // LENGTH_BANDS:(i + 1) * len(ordered) // LENGTH_BANDS]
             for i in range(LENGTH_BANDS)]
    for band in bands:
        rnd.shuffle(band)
    picked: list[dict] = []
    while len(picked) < k:
        for band in bands:
            if band and len(picked) < k:
                picked.append(band.pop())
    return sorted(picked, key=_length)


def import_suite(source: str | Path, out: str | Path, slice_field: str = "slice", per_slice: int = 16,
                 max_rows: int = 1000, seed: int = 0, max_bytes: int = 256 << 20) -> ImportReport:
    """Read the requests in ``source``, write the suite to ``out`` (atomically, only on success)."""
    source, out = Path(source), Path(out)
    name = str(source)
    if out.exists() and source.exists() and out.resolve() == source.resolve():
        raise SuiteError(Problem(name, "--out is the request sample itself: the import would overwrite it",
                                 hint="write the suite to another file"))
    try:
        size = source.stat().st_size
    except OSError as exc:
        raise SuiteError(Problem(name, f"cannot read the request sample: {exc.strerror or exc}",
                                 hint="pass a JSONL file of requests")) from None
    if size > max_bytes:
        raise SuiteError(Problem(name, f"the file is {size} bytes, over the import's limit of {max_bytes}",
                                 hint="sample it first (e.g. `shuf -n 100000 FILE`) or raise --max-bytes"))
    report = ImportReport(source=name, out=str(out))
    problems: list[Problem] = []
    more = 0
    by_slice: dict[str, dict[str, dict]] = {}  # slice -> canonical JSON -> row (insertion-ordered)
    with source.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            report.read += 1
            if len(raw) > MAX_LINE_BYTES:
                got: tuple | Problem = Problem(name, f"the line is {len(raw)} bytes, over {MAX_LINE_BYTES}", line=n,
                                               hint="leave very long requests out of the sample")
            else:
                try:
                    got = _row(loads_json(raw.decode("utf-8")), n, name, slice_field)
                except UnicodeDecodeError as exc:
                    got = Problem(name, f"not UTF-8 text ({exc.reason} at byte {exc.start})", line=n, hint=HINT)
                except (json.JSONDecodeError, RecursionError) as exc:
                    msg = (f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError)
                           else "nested too deeply")
                    got = Problem(name, f"not valid JSON: {msg}", line=n, hint=HINT)
            if isinstance(got, Problem):
                if len(problems) < MAX_REPORTED:
                    problems.append(got)
                else:
                    more += 1
                continue
            tag, row = got
            slc = _slice_name(tag)
            if tag is not None and str(tag) != slc:
                report.renamed[str(tag)[:100]] = slc
            key = json.dumps(row, sort_keys=True, ensure_ascii=False)
            bucket = by_slice.setdefault(slc, {})
            if key in bucket:
                report.duplicates += 1
            else:
                bucket[key] = row
    if more:
        problems.append(Problem(name, f"and {more} more problem(s) like these", hint=HINT))
    if not problems and not by_slice:
        problems.append(Problem(name, "the file holds no requests", hint=HINT))
    if problems:
        raise SuiteError(problems)
    rnd = random.Random(seed)
    lines: list[str] = []
    slices = sorted(by_slice)
    budget = max_rows
    for i, slc in enumerate(slices):
        rows = list(by_slice[slc].values())
        share = min(per_slice, budget // (len(slices) - i))  # the cap, shared evenly over the slices left
        picked = _stratified(rows, share, rnd)
        budget -= len(picked)
        report.available[slc], report.kept[slc] = len(rows), len(picked)
        lines += [json.dumps({"id": f"{slc}-{j:04d}", "slice": slc, **row}, ensure_ascii=False)
                  for j, row in enumerate(picked)]
    text = "\n".join(lines) + "\n"
    parse_suite(text, str(out))  # valid like any suite, or no file
    atomic_write_text(out, text)
    return report


__all__ = ["ImportReport", "import_suite"]

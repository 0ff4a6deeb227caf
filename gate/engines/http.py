"""Gate a serving stack over HTTP: vLLM, SGLang, TGI or llama.cpp behind their OpenAI-compatible API.

Two endpoints are configured: the engine under test (speculation on) and, usually, the reference (the same
stack with speculation off), each either an existing URL or a command the gate launches and tears down.

* **Requests.**  ``POST /v1/completions`` with the prompt as token ids, ``max_tokens``, ``temperature``
  (0 for greedy), a per-request ``seed`` when sampling, top-k ``logprobs``, and ``stream: true`` for the
  time to first token and per-token latency.  A preset per stack sets the fields it needs and reads its
  answer; ``engines[].http.extra_body`` adds fields of your own.
* **Load levels are concurrency.**  A batch of N prompts is sent as N concurrent requests (a wave): the
  server batches them as it does production traffic.
* **Counters.**  ``/metrics`` (Prometheus text, parsed with ``prometheus_client``) is scraped before and
  after each wave; the difference of the speculation counters is the wave's (vLLM: ``spec_decode_num_*``).
* **Failures.**  Timeouts, 5xx, connection resets, malformed JSON, a stream that stops early and a server
  that dies each fail the wave with a message that names the load level, the request and the prompt; the
  run records it and goes on (see ``gate.run.execute``).
* **Secrets.**  An API key comes from the environment variable named in the config, never from the file,
  and is never logged or written to a report.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import requests

from gate.engines.base import (
    SCORE_TOP,
    BatchResult,
    Capabilities,
    EngineFailure,
    GenerationSettings,
    Request,
    SequenceResult,
    SpecCounters,
)
from gate.errors import ConfigError, EngineError, Problem
from gate.stacks.base import Chunk, Stack, as_id, first_choice

# --- the wire: each stack's request fields and answers are its own (gate/stacks/); the chat route is read here ---


def _error_event(event) -> str | None:
    """The message of a streamed ``{"error": {...}}`` event (an OpenAI-style error sent in the stream), else None."""
    if not isinstance(event, dict) or "error" not in event or "choices" in event:
        return None
    err = event["error"]
    text = err.get("message") if isinstance(err, dict) else err
    return str(text or err)[:300]


def parse_chat(event: dict) -> Chunk:
    """vLLM's chat route with ``return_token_ids``: ``choices[0].token_ids`` per event, the rendered prompt's ids
    in the first (``prompt_token_ids``), the text in ``delta.content``, and with logprobs
    (``return_tokens_as_token_ids``) ``logprobs.content[].top_logprobs[]`` keyed "token_id:<n>"."""
    choice = first_choice(event)
    ids = choice.get("token_ids")
    if ids is not None and not (isinstance(ids, list) and all(as_id(t) is not None for t in ids)):
        raise TypeError("token_ids is not a list of ids")
    tops = None
    content = (choice.get("logprobs") or {}).get("content")
    if isinstance(content, list) and content:
        tops = [{as_id(t.get("token")): float(t["logprob"]) for t in (c.get("top_logprobs") or [])
                 if as_id(t.get("token")) is not None} for c in content]
    prompt = event.get("prompt_token_ids")
    if prompt is not None and not (isinstance(prompt, list) and all(as_id(t) is not None for t in prompt)):
        raise TypeError("prompt_token_ids is not a list of ids")
    return Chunk([int(t) for t in ids] if ids is not None else None, tops,
                 (choice.get("delta") or {}).get("content") or "", finish=choice.get("finish_reason"),
                 prompt_ids=[int(t) for t in prompt] if prompt is not None else None)


CHAT_ROUTE = "/v1/chat/completions"




# --- metrics ------------------------------------------------------------------------------------------


def scrape(url: str, preset: Stack, counters: dict[str, str], headers: dict, timeout: float = 10
           ) -> dict[str, float] | None:
    """The speculation counters now: {SpecCounters field or "pos:<j>": value}; None when unavailable."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = requests.get(url, headers=headers, timeout=timeout).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
    except (requests.RequestException, ValueError):
        return None
    out: dict[str, float] = {}
    for name, family in counters.items():
        fam = families.get(family) or families.get(family.removesuffix("_total"))
        if fam is not None:
            out[name] = sum(s.value for s in fam.samples if s.name.endswith(("_total", family)) or s.name == fam.name)
    if preset.per_pos:
        fam = families.get(preset.per_pos)
        if fam is not None:
            for s in fam.samples:
                pos = s.labels.get("position")
                if pos is not None and pos.isdigit() and not s.name.endswith("_created"):
                    out[f"pos:{pos}"] = out.get(f"pos:{pos}", 0.0) + s.value
    return out


def counters_between(before: dict | None, after: dict | None) -> SpecCounters | None:
    if before is None or after is None or not after:
        return None
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    if "_generated" in d and "num_drafts" in d:  # tokens emitted = one per verify step + the accepted drafts
        d["num_accepted_tokens"] = max(0.0, d["_generated"] - d["num_drafts"])
    pos = sorted((int(k[4:]), v) for k, v in d.items() if k.startswith("pos:"))
    per_pos = [0] * (pos[-1][0] + 1) if pos else []
    for j, v in pos:
        per_pos[j] = int(v)
    return SpecCounters(num_drafts=int(d.get("num_drafts", 0)), num_draft_tokens=int(d.get("num_draft_tokens", 0)),
                        num_accepted_tokens=int(d.get("num_accepted_tokens", 0)),
                        num_accepted_tokens_per_pos=per_pos,
                        num_draft_tokens_per_pos=[int(d.get("num_drafts", 0))] * len(per_pos))


# --- the engine ---------------------------------------------------------------------------------------


class HttpEngine:
    """One endpoint of a serving stack as an engine; a batch is a wave of concurrent requests."""

    def __init__(self, name: str, url: str, preset: Stack, speculative: bool, model: str | None = None,
                 api_key: str | None = None, logprobs: int = 5, timeout_s: float = 300.0,
                 extra_body: dict | None = None, metrics_path: str | None = "/metrics",
                 counters: dict[str, str] | None = None, tokenize: Callable[[str], list[int]] | None = None,
                 detokenize: Callable[[list[int]], str] | None = None, where: tuple[str, str] | None = None,
                 chat: bool = False, score_top: int = SCORE_TOP):
        self.name = name
        self.score_top = score_top  # top tokens asked per scored position (-1: every token, vLLM's prompt_logprobs)
        self.chat = chat  # a chat row goes to the chat route, rendered by the server's own template
        self.where = where or (f"engine {name!r}", "http")  # (config file, "engines[i].http") for errors
        self.url = url.rstrip("/")
        self.preset = preset
        self.speculative = speculative
        self.model = model
        self.logprobs = logprobs
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})
        self.metrics_url = self.url + metrics_path if metrics_path and speculative else None
        self.counters = {**preset.counters, **(counters or {})}
        self.tokenize = tokenize
        self.detokenize = detokenize
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.session = requests.Session()
        self.cancelled = threading.Event()  # set by cancel(): streams in flight stop at their next chunk
        # a request-rate replay keeps many requests in flight: one pooled connection each, not a new one per request
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=256)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.capabilities = Capabilities(in_process=False, steppable=False,
                                         counters="engine" if self.metrics_url and self.counters else "none")

    def __repr__(self) -> str:  # never the key
        return f"HttpEngine({self.name!r}, {self.url!r}, preset={self.preset.name!r})"

    def _model(self) -> str | None:
        if self.model is None:
            try:
                data = self.session.get(self.url + "/v1/models", headers=self._headers, timeout=10).json()
                self.model = data["data"][0]["id"]
            except (requests.RequestException, ValueError, KeyError, IndexError, TypeError):
                self.model = ""
        return self.model or None

    def route(self, req: Request) -> str:
        """Where ``req`` goes: a chat row to the chat route on ``http.route: chat``, the rest to the preset's."""
        return CHAT_ROUTE if self.chat and req.messages is not None else self.preset.route

    def body(self, req: Request, settings: GenerationSettings) -> dict:
        if self.route(req) == CHAT_ROUTE:  # the server renders the messages; ids and its prompt come back
            top = None if self.speculative else self._reference_logprobs()
            extra = {"return_token_ids": True, "return_tokens_as_token_ids": True,
                     **({"logprobs": True, "top_logprobs": top} if top else {})}
            b = {"messages": [{"role": r, "content": c} for r, c in req.messages]}
        else:
            prompt = self.detokenize(list(req.prompt_ids)) if self.preset.prompt_as_text and self.detokenize \
                else list(req.prompt_ids)
            extra = self.preset.engine_request if self.speculative else \
                {"logprobs": self._reference_logprobs(), **self.preset.reference_request}
            b = {"prompt": prompt}
        b.update({"max_tokens": req.max_new_tokens, "temperature": settings.temperature, "stream": True, **extra,
                  **self.extra_body})
        if self._model():
            b["model"] = self.model
        if not settings.greedy:
            b["seed"] = req.seed
        if settings.truncated:  # vLLM's names; 0 / 1.0 / 0.0 are its "off" too
            b.update(top_k=settings.top_k or None, top_p=settings.top_p, min_p=settings.min_p)
        if not settings.eos_token_ids:
            b["ignore_eos"] = True
        return {k: v for k, v in b.items() if v is not None}

    def _reference_logprobs(self) -> int | None:
        """Top-k asked of the reference: http.logprobs, raised to what the preset needs for token ids (vLLM
        sends ids in logprobs.tokens, so 0 is sent as 0; llama-server's OpenAI route only in logprobs.content, so at
        least 1; its native route, the llamacpp preset's, streams ids whatever logprobs says)."""
        need = self.preset.min_logprobs
        if need is None:
            return self.logprobs or None
        return max(self.logprobs, need)

    def _no_ids(self, body: dict) -> ConfigError:
        """A stack that should give token ids gave text: stop at once rather than compare re-tokenized text
        (its ids differ from the generated ones, which reads as confident divergences of a correct engine)."""
        source, at = self.where
        role = "engine under test" if self.speculative else "reference"
        asked = body.get("logprobs")
        if self.preset.min_logprobs is not None and (asked is None or asked < self.preset.min_logprobs):
            field = f"{at}.logprobs"
            hint = (f"the request asked for logprobs={asked!r} (does http.extra_body override it?); "
                    f"{self.preset.name} returns token ids only with logprobs >= {self.preset.min_logprobs}")
        else:
            fields = {k: body[k] for k in ("logprobs", "return_tokens_as_token_ids", "return_token_ids") if k in body}
            field = f"{at}.preset"
            hint = (f"the {self.preset.name!r} preset asks for ids with {json.dumps(fields)} and this server "
                    "ignored it: use the preset of your stack (vllm, sglang, llamacpp), a build that returns ids, "
                    "or preset: openai to compare text only (the gate then cannot tell bugs from noise)")
        return ConfigError(Problem(source, f"the {role} at {self.url} answered with text but no token ids, so the "
                                           "gate would have to re-tokenize its text, and re-tokenized ids differ "
                                           "from generated ones", field=field, hint=hint))

    def generate(self, requests_: list[Request], settings: GenerationSettings) -> BatchResult:
        before = scrape(self.metrics_url, self.preset, self.counters, self._headers) if self.metrics_url else None
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(requests_)) as pool:
            futures = [pool.submit(self._one, i, r, settings, start, len(requests_))
                       for i, r in enumerate(requests_)]
            seqs, failure = [], None
            for f in futures:
                try:
                    seqs.append(f.result())
                except EngineFailure as exc:
                    failure = failure or exc
        wall = time.perf_counter() - start
        if failure is not None:
            raise failure
        after = scrape(self.metrics_url, self.preset, self.counters, self._headers) if self.metrics_url else None
        return BatchResult(seqs, wall_s=wall, counters=counters_between(before, after))

    def _same_prompt(self, rendered: list[int] | None, req: Request, i: int, n: int) -> None:
        """The chat route's prompt as the server rendered it must be the one the gate scores and the reference
        gets: else every comparison would be between two different prompts."""
        if rendered is None:
            raise self._fail("contract", i, n, req, "the chat route returned no prompt_token_ids (return_token_ids "
                                                    "was asked): the gate cannot tell what prompt the server rendered")
        ours = list(req.prompt_ids)
        if rendered != ours:
            at = next((j for j, (a, b) in enumerate(zip(rendered, ours)) if a != b), min(len(rendered), len(ours)))
            raise self._fail("contract", i, n, req, f"the server's chat template rendered the messages to "
                                                    f"{len(rendered)} tokens, the gate's to {len(ours)}, first "
                                                    f"different at token {at} (server {rendered[at:at + 3]}, gate "
                                                    f"{ours[at:at + 3]}): set suite.chat_template to the template the "
                                                    "server uses")

    def _fail(self, kind: str, i: int, n: int, req: Request, text: str) -> EngineFailure:
        who = f"request {i + 1} of {n} (load level {n}" + (f", prompt {req.prompt_id!r}" if req.prompt_id else "") + ")"
        return EngineFailure(kind, "HTTPError", f"{self.name} at {self.url}: {who}: {text}"[:600])

    def identity(self) -> str | None:
        """The stack's version as it reports it: vLLM's and SGLang's ``/version``, llama.cpp's ``/props``
        (``build_info``), TGI's ``/info``; None where it answers none of them."""
        for path, keys in (("/version", ("version",)), ("/props", ("build_info",)), ("/info", ("version",))):
            try:
                data = self.session.get(self.url + path, headers=self._headers, timeout=5).json()
            except (requests.RequestException, ValueError):
                continue
            found = next((data[k] for k in keys if isinstance(data, dict) and isinstance(data.get(k), str)), None)
            if found:
                return f"{self.preset.name} {found}"[:120]
        return None

    def score(self, prompt_ids, continuation: list[int], top: int | None = None) -> tuple[list[float], list[dict]]:
        """The target's log-probabilities of ``continuation`` after ``prompt_ids``, teacher-forced, as the server
        computes them (vLLM's ``prompt_logprobs`` over prompt + continuation; the target's distribution at T=1):
        (the logprob of each continuation token, the server's ``top`` most likely tokens at each of its positions,
        by rank; ``top`` -1: every token).  A server that allows fewer is asked again for as many as it allows, and
        asked for that many from then on."""
        top = self.score_top if top is None else top
        prompt = list(prompt_ids)
        body = {"prompt": prompt + list(continuation), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": top,
                **({"model": self.model} if self._model() else {})}
        try:
            resp = self.session.post(self.url + self.preset.route, json=body, headers=self._headers,
                                     timeout=(10, self.timeout_s))
        except requests.RequestException as exc:
            raise EngineFailure("crash", "HTTPError", f"{self.name} at {self.url}: scoring failed "
                                                      f"({type(exc).__name__})") from None
        allowed = re.search(r"max allowed: (\d+)", resp.text) if resp.status_code == 400 else None
        if allowed and int(allowed[1]) > 0 and (top < 0 or int(allowed[1]) < top):
            self.score_top = int(allowed[1])
            return self.score(prompt_ids, continuation, self.score_top)
        if resp.status_code >= 400:
            raise EngineFailure("crash", "HTTPError", f"{self.name} at {self.url}: scoring answered HTTP "
                                                      f"{resp.status_code}: {resp.text[:200]}")
        try:
            rows = resp.json()["choices"][0]["prompt_logprobs"][len(prompt):len(prompt) + len(continuation)]
            logprobs = [float(row[str(t)]["logprob"]) for row, t in zip(rows, continuation)]
            tops = [{int(i): float(v["logprob"]) for i, v in row.items() if top < 0 or int(v["rank"]) <= top}
                    for row in rows]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise EngineFailure("contract", "HTTPError", f"{self.name} at {self.url}: no usable prompt_logprobs "
                                                         f"for the continuation ({type(exc).__name__})") from None
        if len(logprobs) != len(continuation):
            raise EngineFailure("contract", "HTTPError", f"{self.name} at {self.url}: prompt_logprobs covered "
                                                         f"{len(logprobs)} of {len(continuation)} tokens")
        return logprobs, tops

    def cancel(self) -> None:
        """Cut off every request in flight (an interrupted request-rate replay): each stops at its next chunk."""
        self.cancelled.set()

    def stream(self, req: Request, settings: GenerationSettings) -> tuple[SequenceResult, float, list[float]]:
        """One request on its own, as a request-rate replay sends it (gate/run/traffic.py): its result, when it was
        sent and when each token arrived (``time.perf_counter`` readings)."""
        times: list[float] = []
        start = time.perf_counter()
        return self._one(0, req, settings, start, 1, times), start, times

    def _one(self, i: int, req: Request, settings: GenerationSettings, start: float, n: int,
             times_out: list[float] | None = None) -> SequenceResult:
        body = self.body(req, settings)
        route = self.route(req)
        parse = parse_chat if route == CHAT_ROUTE else self.preset.parse
        rendered = None
        try:
            resp = self.session.post(self.url + route, json=body, stream=True,
                                     headers=self._headers, timeout=(10, self.timeout_s))
        except requests.Timeout:
            raise self._fail("timeout", i, n, req, f"timed out after {self.timeout_s:.0f} s") from None
        except requests.RequestException as exc:
            raise self._fail("crash", i, n, req, f"connection failed ({type(exc).__name__}): the server may have "
                                                 "died") from None
        if resp.status_code >= 400:
            raise self._fail("crash", i, n, req, f"HTTP {resp.status_code}: {resp.text[:200]}")
        ids: list[int] = []
        tops: list[dict[int, float]] = []
        text, finish, done, times, counters, generated = "", None, False, [], None, None
        have_tops = True
        pieces: list[str] | None = []  # a text-only stack's token texts and text-keyed top-k (None: not all given)
        text_tops: list[dict[str, float]] | None = []
        try:
            for raw in resp.iter_lines():
                if self.cancelled.is_set():
                    resp.close()
                    raise self._fail("crash", i, n, req, "cancelled: the run was interrupted")
                if time.perf_counter() - start > self.timeout_s:  # the read timeout is per chunk: bound the whole
                    resp.close()
                    raise self._fail("timeout", i, n, req, f"still streaming after {self.timeout_s:.0f} s "
                                                           f"(http.request_timeout_s), {len(ids)} tokens in")
                if len(ids) > req.max_new_tokens:
                    resp.close()
                    raise self._fail("contract", i, n, req, f"the server streamed {len(ids)} tokens for "
                                                            f"max_tokens {req.max_new_tokens}")
                if not raw or not raw.startswith(b"data:"):
                    continue
                data = raw[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                try:
                    event = json.loads(data)
                    refused = _error_event(event)
                    chunk = None if refused else parse(event)
                except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                    raise self._fail("crash", i, n, req, f"malformed stream chunk: {data[:120]!r}") from None
                if refused:  # vLLM streams a refusal as an event with status 200 (a sampling parameter it refuses)
                    resp.close()
                    raise self._fail("crash", i, n, req, f"the server answered with an error: {refused}")
                now = time.perf_counter()
                text += chunk.text
                if chunk.text and pieces is not None:
                    if chunk.texts is None or "".join(chunk.texts) != chunk.text:
                        pieces = text_tops = None
                    else:
                        pieces += chunk.texts
                        if text_tops is not None and chunk.top_texts is not None:
                            text_tops += chunk.top_texts
                        else:
                            text_tops = None
                if chunk.ids:  # (llama-server's last event carries an empty list)
                    ids += chunk.ids
                    times += [now] * len(chunk.ids)
                    if chunk.tops is not None and len(chunk.tops) == len(chunk.ids):
                        tops += chunk.tops
                    else:
                        have_tops = False
                if chunk.prompt_ids is not None:
                    rendered = chunk.prompt_ids
                if chunk.counters:
                    counters = chunk.counters
                finish = chunk.finish or finish
                generated = chunk.generated if chunk.generated is not None else generated
                if chunk.done:
                    done = True
                    break
        except requests.RequestException as exc:
            raise self._fail("crash", i, n, req, f"the stream broke after {len(ids)} tokens "
                                                 f"({type(exc).__name__})") from None
        if not done:
            end = "[DONE]" if self.preset.route == "/v1/completions" else "its last event (stop: true)"
            raise self._fail("crash", i, n, req, f"the stream stopped early, after {len(ids)} tokens, without {end}")
        if route == CHAT_ROUTE:
            self._same_prompt(rendered, req, i, n)
        if generated is not None and ids and generated != len(ids):  # llama-server holds back an incomplete UTF-8
            raise self._fail("contract", i, n, req, f"the server generated {generated} tokens but streamed the ids "
                                                    f"of {len(ids)}: token ids are missing from its stream")
        text_only = not ids and bool(text)
        if text_only and self.preset.gives_ids:
            raise self._no_ids(body)
        if text_only:  # a text-only stack (tgi, openai): tokenize its text; the checks then compare text
            ids = self.tokenize(text) if self.tokenize else []
            times = [time.perf_counter()] * len(ids)
        else:
            pieces = text_tops = None
        if times_out is not None and not text_only:
            times_out += times
        ttft = times[0] - start if times else None
        per_token = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
        spec = SpecCounters(num_drafts=0, num_draft_tokens=counters.get("num_draft_tokens", 0),
                            num_accepted_tokens=counters.get("num_accepted_tokens", 0)) if counters else None
        return SequenceResult(ids, "eos" if finish == "stop" else "max_tokens",
                              wall_s=(times[-1] - start) if times else time.perf_counter() - start, ttft_s=ttft,
                              per_token_s=per_token, counters=spec,
                              top_logprobs=tops if have_tops and tops and len(tops) == len(ids) else None,
                              text_only=text_only, text=text if text_only else None, token_texts=pieces or None,
                              top_text_logprobs=text_tops if pieces and text_tops and len(text_tops) == len(pieces)
                              else None)


def api_key(env_name: str | None, label: str) -> str | None:
    if not env_name:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise EngineError(Problem(label, f"the environment variable {env_name} is not set", field="api_key_env",
                                  hint="export the API key in that variable on the runner (a repository secret)"))
    return key


__all__ = ["CHAT_ROUTE", "HttpEngine", "api_key", "counters_between", "parse_chat", "scrape"]

"""The chat route (issue 48, item 2): with ``http.route: chat`` an http engine sends a suite's ``messages`` rows to
``/v1/chat/completions``, where the server's own chat template renders them, reads each token's id and the
prompt the server rendered (vLLM's ``return_token_ids``), and refuses to compare when the server rendered another
prompt than the one the gate scores and the reference gets."""

from __future__ import annotations

import json

import pytest
from test_http import gate_here, serving

from gate import stacks
from gate.engines.base import GenerationSettings, Request
from gate.engines.http import CHAT_ROUTE, HttpEngine, parse_chat
from gate.errors import ConfigError
from gate.inputs.config import PACKAGE_DIR, parse_config

TEMPLATE = (PACKAGE_DIR / "demo" / "chat_template.jinja").read_text()
MESSAGES = (("system", "Be brief."), ("user", "What is a list?"))


def test_a_chat_row_goes_to_the_chat_route_with_its_messages_and_a_prompt_row_stays_on_completions():
    engine = HttpEngine("x", "http://127.0.0.1:9", stacks.get("vllm"), False, model="m", chat=True, logprobs=5)
    chat = Request((1, 2, 3), 8, 7, "c", MESSAGES)
    body = engine.body(chat, GenerationSettings(0.0, 4, (2,)))
    assert engine.route(chat) == CHAT_ROUTE and "prompt" not in body
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "What is a list?"}]
    assert body["return_token_ids"] is True and (body["logprobs"], body["top_logprobs"]) == (True, 5)
    plain = Request((1, 2, 3), 8, 7, "p")
    assert engine.route(plain) == "/v1/completions" and engine.body(plain, GenerationSettings())["prompt"] == [1, 2, 3]
    off = HttpEngine("x", "http://127.0.0.1:9", stacks.get("vllm"), False, model="m", chat=False)
    assert off.route(chat) == "/v1/completions", "route: completions renders the template in the gate, as before"


def test_the_chat_stream_is_read_ids_prompt_and_top_logprobs():
    first = {"prompt_token_ids": [5, 6], "choices": [{"index": 0, "delta": {"content": "a"}, "token_ids": [9],
             "logprobs": {"content": [{"token": "token_id:9", "logprob": -0.1,
                                       "top_logprobs": [{"token": "token_id:9", "logprob": -0.1},
                                                        {"token": "token_id:4", "logprob": -2.5}]}]}}]}
    c = parse_chat(first)
    assert (c.ids, c.prompt_ids, c.text, c.tops) == ([9], [5, 6], "a", [{9: -0.1, 4: -2.5}])
    with pytest.raises(TypeError):
        parse_chat({"choices": [{"delta": {}, "token_ids": ["x"]}]})


def test_only_a_preset_whose_chat_route_reports_its_prompt_takes_route_chat():
    text = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu}
engines:
  - {type: http, name: s, http: {preset: %s, route: chat, server: {url: "http://127.0.0.1:8080"},
     reference: {url: "http://127.0.0.1:8081"}}}
"""
    assert parse_config(text % "vllm", PACKAGE_DIR / "t.yaml").config.engines[0].http.route == "chat"
    with pytest.raises(ConfigError) as err:
        parse_config(text % "llamacpp", PACKAGE_DIR / "t.yaml")
    assert "engines[0].http.route" in str(err.value) and "return_token_ids" in str(err.value), str(err.value)


CONFIG = """\
version: 1
models: {{target: {{path: "specguard:demo/target"}}, draft: {{path: "specguard:demo/draft"}}, device: cpu}}
batching: {{batch_sizes: [1, 4], compositions: 1}}
generation: {{max_new_tokens: 8}}
suite: {{path: "specguard:suites/chat.jsonl", chat_template: "specguard:demo/chat_template.jinja",
         max_prompts_per_slice: 2}}
checks: {{speedup: {{enabled: false}}}}
output: {{dir: out, cache_dir: null}}
engines:
  - type: http
    name: served
    http:
      preset: vllm
      route: chat
      server: {{url: 'http://127.0.0.1:{0}'}}
      reference: {{url: 'http://127.0.0.1:{1}'}}
      request_timeout_s: 60
"""


@pytest.mark.slow
@pytest.mark.parametrize("template", ["same", "other"])
def test_a_chat_route_gate_compares_what_the_server_rendered_or_refuses_a_different_prompt(tmp_path, template):
    from gate.testing.server import load

    pair = load()
    served = TEMPLATE if template == "same" else TEMPLATE.replace("Answer:", "Reply:")
    kw = {"chat_template": served}
    with serving(pair, ("speculative", kw), ("reference", kw)) as (engine, reference):
        proc = gate_here(tmp_path, CONFIG.format(engine, reference), "gate")
    said = proc.stdout + proc.stderr
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    if template == "same":
        assert proc.returncode == 0, said[-3000:]
        rows = checks["equivalence"]["served"]
        assert {bs: r["exact_match"] for bs, r in rows.items()} == {"1": 1.0, "4": 1.0}, rows
        results = json.loads((tmp_path / "out" / "results.json").read_text())
        assert any(s["token_ids"] for ex in results["executions"] if ex["engine"] == "served"
                   for s in ex["sequences"]), "the chat route's token ids were read"
    else:
        assert proc.returncode == 1
        assert "the server's chat template rendered the messages to" in said and \
            "set suite.chat_template to the template the server uses" in said, said[-3000:]

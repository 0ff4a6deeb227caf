"""``type: http``: a serving stack (vLLM, SGLang, TGI, llama.cpp) behind its OpenAI-compatible API, speculation on,
with the same stack with speculation off as the gate's reference where the config names one
(gate/engines/http.py, docs/serving.md)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StrictInt, field_validator

from gate import stacks
from gate.engines.base import SCORE_TOP, Capabilities
from gate.engines.registry import EngineType, base_engine_of, register
from gate.inputs.config import REFERENCE, EngineConfig
from gate.inputs.fields import Seconds, Strict, Text, UrlPath
from gate.inputs.launch import PORT_PLACEHOLDER

DifferenceName = Literal["model", "tensor_parallel", "pipeline_parallel", "dtype", "quantization", "kv_cache_dtype",
                         "max_model_len", "batch_budget", "max_seqs", "chunked_prefill", "prefix_caching", "eager",
                         "attention", "memory", "gpu_layers"]  # gate.stacks.base.SETTINGS, in its order


def _known_stack(name: str) -> str:
    if stacks.find(name) is None:
        raise ValueError(f"no serving stack {name!r}: expected one of {', '.join(stacks.names())} (gate/stacks/; a "
                         "stack of your own is a module that registers one, imported before the config is read)")
    return name


# A preset: a registered stack's name (gate/stacks/); a stack registered by the user's own module is one too, so
# the schema gives the built-in ones as examples, not as the only values
PresetName = Annotated[str, AfterValidator(_known_stack),
                       Field(json_schema_extra=lambda schema: schema.update(examples=stacks.names()))]


class EndpointConfig(Strict):
    """Where a serving stack answers, and optionally how the gate starts it."""

    url: str
    launch: list[str] | None = None  # a command the gate runs (own process group), waits on and tears down
    health: UrlPath = "/health"
    startup_timeout_s: Seconds = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    log: Text | None = None  # file for a launched server's output

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v):
            raise ValueError(f"expected an http(s):// URL, got {v!r}")
        if "@" in v.split("/", 3)[2]:  # user:password@host would be written to logs and results
            raise ValueError("credentials in the URL would end up in logs and reports: put the key in an "
                             "environment variable and name it in http.api_key_env")
        if PORT_PLACEHOLDER in v:
            raise ValueError(f"the url names the server's real port, and {PORT_PLACEHOLDER} is a placeholder of the "
                             f"launch line only (the gate fills it in with the url's port), got {v!r}: write the "
                             f"port in the url (http://127.0.0.1:8000) and --port {PORT_PLACEHOLDER} in launch")
        try:  # every later reader (the launch line's port, paired mode's free port) parses it as urlsplit does
            u = urlsplit(v)
            port = u.port
        except ValueError as exc:
            raise ValueError(f"expected an http(s):// URL with a host and a port from 1 to 65535, got {v!r} "
                             f"({exc})") from None
        if not u.hostname or port == 0:
            raise ValueError(f"expected an http(s):// URL with a host and a port from 1 to 65535, got {v!r}")
        return v.rstrip("/")

    @field_validator("launch", mode="before")
    @classmethod
    def _one_string(cls, v):
        if isinstance(v, str):  # a shell line: the gate runs no shell (nothing of the config reaches one)
            import shlex

            try:
                words = shlex.split(v)
            except ValueError:
                words = v.split()
            raise ValueError(f"expected the command as a list of strings, got one string; write it as "
                             f"{json.dumps(words)}")
        return v

    @field_validator("launch")
    @classmethod
    def _launch(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not all(isinstance(x, str) and x for x in v)):
            raise ValueError("expected a command as a list of strings, e.g. [vllm, serve, org/model, --port, '8000']")
        return v


class HttpConfig(Strict):
    """A serving stack behind its OpenAI-compatible API (docs/serving.md)."""

    preset: PresetName = "vllm"
    server: EndpointConfig  # speculation on: the engine under test
    reference: EndpointConfig | None = None  # the same stack with speculation off: the gate's reference
    model: Text | None = None  # the request's "model" (default: the first of /v1/models)
    api_key_env: str | None = None  # the environment variable holding the API key (never the key itself)
    logprobs: Annotated[StrictInt, Field(ge=0, le=20)] = 5
    # how many of the target's top tokens the reference server returns per scored position where the target lives only
    # on the servers (vLLM's prompt_logprobs): "all" (the server launched with --max-logprobs -1) judges every sampled
    # token exactly at any temperature and truncation; left out of the digest at the default
    score_logprobs: Annotated[StrictInt, Field(ge=1, le=2 ** 20)] | Literal["all"] = Field(
        SCORE_TOP, exclude_if=lambda v: v == SCORE_TOP)
    request_timeout_s: Seconds = 300.0
    extra_body: dict[str, Any] = Field(default_factory=dict)  # more request fields (a custom mapping)
    metrics: UrlPath | None = "/metrics"  # the Prometheus endpoint; null: no counters
    counters: dict[str, str] = Field(default_factory=dict)  # SpecCounters field -> metric family (custom mapping)
    # "chat": a suite's `messages` rows go to /v1/chat/completions and the server's own chat template renders them
    # (the rest stay on the completions route); left out of the digest while "completions"
    route: Literal["completions", "chat"] = Field("completions", exclude_if=lambda v: v == "completions")
    # settings on which the reference's launch line may differ from the server's on purpose (gate/stacks/base.py
    # SETTINGS): each is then a warning, not a refusal; left out of the digest while empty
    allow_differences: list[DifferenceName] = Field(default_factory=list, exclude_if=lambda v: not v)

    @field_validator("allow_differences")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        twice = sorted({name for name in v if v.count(name) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named more than once")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(f"expected the name of an environment variable (the key itself never goes in the "
                             f"config), got {v[:4] + '…' if len(v) > 4 else v!r}")
        return v


class HttpEngineConfig(EngineConfig):
    type: Literal["http"] = "http"
    http: HttpConfig | None = Field(None, validate_default=True)

    @field_validator("http")
    @classmethod
    def _needed(cls, v: HttpConfig | None) -> HttpConfig:
        if v is None:
            raise ValueError("an http engine needs an 'http:' section (preset, server, reference): docs/serving.md")
        return v

    @classmethod
    def foreign_key_hint(cls, key: str) -> str:
        return " (an http engine names its reference under http.reference)" if key == "reference" else ""

    @property
    def plain_decoding(self) -> str | None:
        return REFERENCE if self.http.reference is not None else None  # its own server is the gate's reference

    @property
    def served_reference(self) -> EndpointConfig | None:
        return self.http.reference

    @property
    def takes_traffic(self) -> bool:
        return self.http.reference is not None

    @property
    def stack(self) -> stacks.Stack:
        return stacks.get(self.http.preset)

    @property
    def scores_continuations(self) -> bool:
        return self.http.reference is not None and self.stack.no_scoring is None

    @property
    def why_no_scoring(self) -> str | None:
        return self.stack.no_scoring if self.http.reference is not None else None

    @property
    def score_width(self) -> int:
        return -1 if self.http.score_logprobs == "all" else self.http.score_logprobs

    def endpoints(self) -> list[tuple[str, EndpointConfig]]:
        return [(f"http.{role}", ep) for role, ep in (("server", self.http.server), ("reference", self.http.reference))
                if ep is not None]

    def memory_shares(self):
        from gate.inputs.launch import memory_fraction

        out = []
        for where, ep in self.endpoints():
            share, said = memory_fraction(self.http.preset, ep.launch or [])
            if ep.launch and share is not None and self.stack.memory is not None:
                out.append((f"{where}.launch", share, said, self.stack.memory[0]))
        return out

    @property
    def launch_preset(self) -> str | None:
        return self.http.preset

    def server_launch(self) -> tuple[str, list[str]] | None:
        server = self.http.server
        return (self.http.preset, server.launch) if server is not None and server.launch else None

    @property
    def prefix_cache_off(self) -> str | None:
        return self.stack.prefix_cache_off

    def _pair(self, config):
        """The differences between the server's and the reference's launch lines (gate.inputs.launch)."""
        from gate.inputs.launch_checks import pair_differences

        h = self.http
        return pair_differences(h.preset, h.server.launch or [], (h.reference.launch or []) if h.reference else [],
                                config.models.target.path)

    def _pair_read(self) -> bool:
        from gate.inputs.launch_checks import starts_stack

        h = self.http
        return h.reference is not None and all(ep.launch and starts_stack(h.preset, ep.launch)
                                               for ep in (h.server, h.reference))

    def launch_warnings(self, config) -> list[str]:
        from gate.inputs.launch_checks import line_notes

        out = []
        for where, ep in self.endpoints():
            if ep.launch:
                out += [f"{where}.launch: {said}" for said in line_notes(self.http.preset, ep.launch,
                                                                         config.batching.batch_sizes,
                                                                         where.rsplit(".", 1)[-1])]
        allowed = set(self.http.allow_differences)
        for d in self._pair(config):
            if d.setting in allowed:
                out.append(f"http.{d.role}.launch: {d.message} (allowed by http.allow_differences)")
            elif not d.refused:
                out.append(f"http.{d.role}.launch: {d.message}; {d.hint}")
        return out

    def problems(self, config, index):
        from gate.inputs.launch import mismatches

        out = []
        if self.http.reference is not None and self.http.reference.url == self.http.server.url:
            out.append((("http", "reference", "url"), f"the reference is the engine under test "
                        f"({self.http.server.url}): every output would equal itself",
                        "point http.reference at the same stack with speculation off"))
        for where, endpoint in self.endpoints():
            if endpoint.launch is None:
                continue
            role = where.rsplit(".", 1)[-1]
            try:
                sp = config.speculation
                found = mismatches(self.http.preset, endpoint.launch, sp.num_draft_tokens,
                                   config.models.draft.path if config.models.draft else None, role, config.method.name,
                                   (sp.prompt_lookup_min, sp.prompt_lookup_max), sp.head)
            except ValueError as err:
                found = [str(err)]
            out += [(("http", role, "launch"), m, None) for m in found]
        out += self._allowance_problems(config)
        if self.http.route == "chat" and not self.stack.chat:
            out.append((("http", "route"), f"preset {self.http.preset} has no chat route the gate can read token ids "
                        "and the rendered prompt from", "use route: completions (the gate renders the chat "
                        "template), or preset vllm (return_token_ids)"))
        sampling = config.generation.sampling
        if sampling is not None and sampling.truncated and self.stack.truncation is None:
            out.append((("http", "preset"), f"generation.sampling truncates ({sampling.described()}), and preset "
                        f"{self.http.preset} truncates in an order the gate does not model "
                        f"({self.stack.no_truncation}): its sampled tokens would be judged against another "
                        "distribution", "sample without top_k/top_p/min_p for this stack, or gate it through preset "
                        + " or ".join(s.name for s in stacks.stacks() if s.truncation)))
        return out


    def _allowance_problems(self, config):
        """Refused differences between the two launch lines, and an allowance that allows nothing."""
        allowed, out = self.http.allow_differences, []
        found = self._pair(config)
        out += [(("http", d.role, "launch"), d.message, d.hint) for d in found
                if d.refused and d.setting not in allowed]
        if allowed and not self._pair_read():
            out.append((("http", "allow_differences"), "there is no pair of launch lines the gate reads to allow a "
                        "difference between (both http.server and http.reference need a launch line that starts "
                        f"{self.http.preset} itself)", "drop http.allow_differences"))
        elif allowed:
            idle = [name for name in allowed if name not in {d.setting for d in found}]
            if idle:
                out.append((("http", "allow_differences"), f"{', '.join(idle)}: the launch lines do not differ "
                            "there, so the allowance allows nothing (and would let a later difference pass unseen)",
                            f"drop {', '.join(idle)} from http.allow_differences"))
        return out


def http_engine(spec: HttpEngineConfig, url: str, pair, loaded, speculative: bool, name: str):
    """An engine over a serving stack's OpenAI-compatible API (``spec`` is an entry of ``loaded``'s engines)."""
    from gate.engines.http import HttpEngine, api_key

    h = spec.http
    return HttpEngine(name, url, stacks.get(h.preset), speculative, model=h.model,
                      api_key=api_key(h.api_key_env, f"engine {spec.label!r}"), logprobs=h.logprobs,
                      score_top=spec.score_width,
                      timeout_s=h.request_timeout_s, extra_body=h.extra_body, metrics_path=h.metrics,
                      counters=h.counters, tokenize=pair.encode, detokenize=pair.decode, chat=h.route == "chat",
                      where=(str(loaded.source), f"engines[{loaded.config.engines.index(spec)}].http"))


class HttpType(EngineType):
    name = "http"
    section = HttpEngineConfig
    paired = "base-engine"
    noun = "http engine"

    def capabilities(self, spec):
        counted = spec.http.metrics and ({**spec.stack.counters, **spec.http.counters})
        return Capabilities(in_process=False, steppable=False, counters="engine" if counted else "none")

    def build(self, spec, pair, loaded, *, log_dir=None, prepared=None):
        return http_engine(spec, spec.http.server.url, pair, loaded, speculative=True, name=spec.label)

    def reference(self, spec, pair, loaded):
        if spec.http.reference is None:
            return None
        return http_engine(spec, spec.http.reference.url, pair, loaded, speculative=False, name=REFERENCE)

    def paired_side(self, head, head_config, base):
        """The base's server on a port of its own when it would share one with any of the head's servers: one
        config file for both sides (the Action's paired mode) then names the same url twice.  A server the gate
        launches moves to a free port (its url, and ``--port`` or ``{port}`` in its launch line); one it does not
        launch cannot be moved: exit 2 before anything starts."""
        from gate.errors import Problem, SpecguardError
        from gate.inputs.launch import moved_launch, url_port, with_port

        base_spec = base_engine_of(head, base, self.noun)
        taken = {_where(ep.url) for e in head_config.config.engines for _, ep in e.endpoints()}
        ep = base_spec.http.server
        if _where(ep.url) not in taken:
            return base, []
        index = base.config.engines.index(base_spec)
        field = f"engines[{index}].http.server"
        if not ep.launch:
            raise SpecguardError(Problem(str(base.source), f"the base's server is the head's ({ep.url}) and the gate "
                                         "does not launch it, so it cannot give it a port of its own: paired mode "
                                         "needs both running side by side", field=f"{field}.url",
                                         line=base.line_of("engines", index, "http", "server", "url"),
                                         hint="give the base config's server its own url, or a launch line the gate "
                                              "starts it with (--port N or {port})"))
        old, new = url_port(ep.url), _free_port(taken)
        launch = moved_launch(list(ep.launch), old, new)
        if launch is None:
            raise SpecguardError(Problem(str(base.source), f"the base's server is the head's ({ep.url}), and its "
                                         f"launch line names no port the gate can move (--port {old}, --port={old}, "
                                         "or {port})", field=f"{field}.launch",
                                         line=base.line_of("engines", index, "http", "server", "launch"),
                                         hint="write the port as --port {port}: the gate fills in the url's port"))
        url = with_port(ep.url, new)
        moved_ep = ep.model_copy(update={"url": url, "launch": launch})
        moved = base_spec.model_copy(update={"http": base_spec.http.model_copy(update={"server": moved_ep})})
        engines = [moved if e is base_spec else e for e in base.config.engines]
        base = base.model_copy(update={"config": base.config.model_copy(update={"engines": engines})})
        return base, [f"base-{head.label} server: {ep.url} is the head's, moved to {url}"]

    def paired_base(self, head, base, pair, *, log_dir=None):
        """The base config's server, launched beside the head's and the reference (gate.run.servers)."""
        from gate.errors import Problem, SpecguardError

        base_spec = base_engine_of(head, base, self.noun)
        if base_spec.http.server.url.rstrip("/") == head.http.server.url.rstrip("/"):
            index = base.config.engines.index(base_spec)
            raise SpecguardError(Problem(str(base.source), f"the base's server is the head's "
                                         f"({head.http.server.url}): paired mode needs both running side by side",
                                         field=f"engines[{index}].http.server.url",
                                         line=base.line_of("engines", index, "http", "server", "url"),
                                         hint="give the base config's server its own port (and its launch line)"))
        return http_engine(base_spec, base_spec.http.server.url, pair, base, speculative=True,
                           name=f"base-{head.label}")

    def case_engine(self, spec, engine, loaded, pair, label, variant=None):
        return {"type": self.name, "label": label, "replay": "requests", "url": engine.url,
                "route": engine.preset.route, "preset": engine.preset.name}

    def case_batch(self, engine, requests, settings):
        return {"bodies": [engine.body(r, settings) for r in requests]}


def _where(url: str) -> tuple[str, int]:
    """(host, port) of a url, every name of this machine one host."""
    from urllib.parse import urlsplit

    from gate.inputs.launch import url_port

    host = urlsplit(url).hostname or ""
    return ("local" if host in ("127.0.0.1", "localhost", "0.0.0.0", "::1", "") else host, url_port(url))


def _free_port(taken: set[tuple[str, int]]) -> int:
    """A port nothing listens on now and no server of the run names."""
    import socket

    for _ in range(64):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if ("local", port) not in taken:
            return port
    raise RuntimeError("no free port found for the base's server")


HTTP = register(HttpType())
__all__ = ["HTTP", "EndpointConfig", "HttpConfig", "HttpEngineConfig", "http_engine"]

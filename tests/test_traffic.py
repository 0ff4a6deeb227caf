"""Request-rate load (checks.traffic): arrival traces, the open-loop replay, the analysis, the baseline comparison,
the comment and the chart.  Fast tier: the stand-in stack is a discrete-event model on a fake clock
(gate/testing/traffic.py), and the HTTP path runs against a scripted in-thread server with no model weights.
The same sweep against real stacks is in tests/test_http.py (slow)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass

import pytest
import synthetic
from test_http import free_port

from gate.checks.doc import ChecksDoc
from gate.checks.traffic import analyze_traffic, crossover, verdicts_for
from gate.inputs.checks_config import TrafficCheck
from gate.run.records import TrafficReplay
from gate.run.results import Results, read_log
from gate.run.traffic import Sent, arrival_times, make_trace, replay, replay_record, sides, trace_seed
from gate.testing.traffic import FakeClock, SimulatedStack, StackModel


@dataclass(frozen=True)
class P:
    id: str
    slice: str
    prompt_ids: tuple
    max_new_tokens: int
    messages: tuple | None = None  # a chat row's (gate.run.plan.PromptInfo)


PROMPTS = [P(f"{'code' if i % 2 else 'prose'}-{i}", "code" if i % 2 else "prose", tuple(range(1, 20 + i)), 24)
           for i in range(8)]
CFG = TrafficCheck(rates=[1, 4, 16, 64], requests=24, repeats=2, slo={"ttft_s": 0.5, "tpot_s": 0.05})


def sweep(cfg: TrafficCheck = CFG, slowdown: float = 1.0, engine: str = "vllm",
          base_slowdown: float | None = None) -> list[TrafficReplay]:
    """The runner's loop (gate/run/runner.py traffic_phase) with the simulated stack as every side (and, with
    ``base_slowdown``, paired mode's base server)."""
    out = []
    slow = {"engine": slowdown, "reference": 1.0, "base": base_slowdown}
    for ri, rate in enumerate(cfg.rates):
        for repeat in range(cfg.repeats):
            seed = trace_seed(cfg.seed, ri, repeat)
            trace = make_trace(PROMPTS, rate, cfg.requests, cfg.arrival, seed)
            for side in sides(repeat, base_slowdown is not None):
                clock = FakeClock()
                model = StackModel(speculative=side != "reference", slowdown=slow[side])
                stack = SimulatedStack(model, clock, len(trace))
                out.append(replay_record(engine, side, rate, repeat, cfg.arrival, seed,
                                         replay(trace, stack.send, clock, cfg.max_in_flight)))
    return out


@pytest.fixture(scope="module")
def base_sweep():
    return sweep()


# --- arrivals and traces ---------------------------------------------------------------------------


def test_constant_arrivals_are_evenly_spaced_and_poisson_ones_are_seeded_at_the_rate():
    assert arrival_times(4, 5, "constant", 0) == [0, 0.25, 0.5, 0.75, 1.0]
    a = arrival_times(10, 4000, "poisson", 7)
    assert a == arrival_times(10, 4000, "poisson", 7) and a != arrival_times(10, 4000, "poisson", 8)
    assert a[0] == 0 and all(y > x for x, y in itertools.pairwise(a))
    assert 9.5 < (len(a) - 1) / a[-1] < 10.5  # 4000 exponential gaps: the mean rate within 5%
    gaps = [y - x for x, y in itertools.pairwise(a)]
    assert 0.95 < (sum(g * g for g in gaps) / len(gaps)) / (2 * 0.1 ** 2) < 1.05  # E[g^2] = 2/rate^2: exponential


def test_a_trace_mixes_every_slice_and_is_the_same_for_both_sides():
    t1, t2 = make_trace(PROMPTS, 2.0, 20, "poisson", 5), make_trace(PROMPTS, 2.0, 20, "poisson", 5)
    assert t1 == t2
    assert {a.prompt.slice for a in t1[:8]} == {"code", "prose"}
    assert sorted(a.prompt.id for a in t1[:8]) == sorted(p.id for p in PROMPTS)  # a shuffle of the whole suite
    assert make_trace(PROMPTS, 2.0, 20, "poisson", 6) != t1
    assert sides(0) == ("engine", "reference") and sides(1) == ("reference", "engine")


# --- the replay ------------------------------------------------------------------------------------


def test_the_replay_sends_open_loop_on_the_clock_and_records_each_token(base_sweep):
    rep = base_sweep[0]
    assert (rep.engine, rep.side, rep.rate, rep.repeat, rep.cut_short) == ("vllm", "engine", 1, 0, None)
    assert len(rep.requests) == 24
    for r in rep.requests:
        assert r.error is None and r.sent_s == r.scheduled_s  # the fake clock: sent exactly on time
        assert r.tokens == 24 and r.scheduled_s < r.first_token_s <= r.end_s <= rep.duration_s
        assert r.gaps_s and all(g > 0 for g in r.gaps_s)
    # open loop: at 64 req/s requests arrive long before earlier ones finish
    fast = next(x for x in base_sweep if x.rate == 64 and x.side == "reference")
    assert sum(r.first_token_s < fast.requests[-1].scheduled_s for r in fast.requests) < len(fast.requests)
    assert max(r.scheduled_s for r in fast.requests) < min(r.end_s for r in fast.requests[-4:])


def test_a_replay_stops_sending_when_too_many_requests_are_in_flight():
    release = threading.Event()
    threading.Timer(0.3, release.set).start()

    def stuck(a):
        release.wait(5)
        return Sent(0.0, [1.0], 1)

    trace = make_trace(PROMPTS, 100.0, 10, "constant", 0)
    reqs, _, cut = replay(trace, stuck, FakeClock(), max_in_flight=3)
    assert len(reqs) == 3 and "3 requests were still in flight" in cut and "max_in_flight" in cut


def test_a_sender_that_raises_fails_its_request_not_the_replay():
    def flaky(a):
        if a.prompt.id.startswith("code"):
            raise ConnectionError("reset by peer")
        return Sent(a.at_s, [a.at_s + 0.1, a.at_s + 0.2], 2)

    clock = FakeClock()
    reqs, _, cut = replay(make_trace(PROMPTS, 10.0, 8, "constant", 0), flaky, clock)
    assert cut is None and len(reqs) == 8
    assert {r.error for r in reqs if r.slice == "code"} == {"ConnectionError: reset by peer"}
    assert all(r.error is None and r.tokens == 2 for r in reqs if r.slice == "prose")


# --- the analysis ----------------------------------------------------------------------------------


def test_speculation_pays_at_low_rates_and_stops_at_high_ones_with_the_crossover_between(base_sweep):
    t = analyze_traffic(Results.model_construct(traffic=base_sweep), CFG, 500)
    e = t.engines["vllm"]
    low, high = e.rates["1"], e.rates["64"]
    assert low.speedup.low > 1.3 and high.speedup.high < 0.9  # the model: ~1.6x alone, ~0.6x saturated
    assert not low.engine.saturated and high.engine.saturated and high.reference.saturated
    assert e.crossover.seen and e.crossover.rate == 16 and 4 < e.crossover.interpolated < 16
    assert set(e.crossover_by_slice) == {"code", "prose"} and all(c.seen for c in e.crossover_by_slice.values())
    assert low.engine.ttft.p50 <= low.engine.ttft.p99 and low.engine.tpot.p99 < low.reference.tpot.p99
    assert low.engine.itl.p99 > low.reference.itl.p99  # fewer, longer steps: bursts of tokens further apart
    assert low.goodput_ratio == pytest.approx(1.0, abs=0.1) and high.engine.goodput_rps < high.reference.goodput_rps
    assert 0.9 < low.engine.offered_rps / 1.0 < 1.6 and low.engine.achieved_rps > 0.75 * low.engine.offered_rps
    lines = [v.why for v in verdicts_for(t)]
    assert any("speculation stops paying at about" in w and "below 1x from 16 req/s" in w for w in lines)
    assert any(w.startswith("at 64 req/s: latency 0.") and w.endswith("saturated") for w in lines)


def test_the_crossover_rule_at_the_edges():
    from gate.checks.doc import SpeedupCI

    def ci(x, lo=None, hi=None):
        return SpeedupCI(estimate=x, low=lo or x - 0.05, high=hi or x + 0.05, n=10, rel_half_width=0.05)

    none = crossover({1: ci(1.5), 2: ci(1.2)})
    assert not none.seen and none.interpolated is None
    first = crossover({1: ci(0.8), 2: ci(0.7)})
    assert first.below_at_lowest and first.rate == 1 and first.interpolated is None
    mid = crossover({1: ci(1.5), 4: ci(0.5)})  # 1 is crossed halfway in log rate: sqrt(1 x 4)
    assert mid.rate == 4 and mid.interpolated == pytest.approx(2.0) and mid.clearly_below_1_from == 4


def test_failed_requests_fail_the_check_naming_the_count_and_the_error(base_sweep):
    broken = [r.model_copy(update={"requests": [q.model_copy(update={"error": "HTTP 500: boom", "end_s": None})
                                                if i < 2 else q for i, q in enumerate(r.requests)]})
              if r.side == "engine" and r.rate == 4 else r for r in base_sweep]
    t = analyze_traffic(Results.model_construct(traffic=broken), CFG, 200)
    fails = [v for v in verdicts_for(t) if v.status == "fail"]
    assert len(fails) == 1 and fails[0].check == "traffic"
    assert "4 of 48 requests to vllm failed at 4 req/s (HTTP 500: boom)" in fails[0].why
    assert t.engines["vllm"].rates["4"].speedup.n == 44  # only requests both sides finished are paired


# --- the verdict against a baseline, the comment and the chart --------------------------------------


def gate_docs(traffic: list[TrafficReplay], paired: bool = False) -> tuple[Results, ChecksDoc]:
    results = synthetic.run().model_copy(update={"traffic": traffic})
    if paired:
        from gate.run.results import PairedRun

        results = results.model_copy(update={"paired": PairedRun(engine="base-vllm", head_engine="vllm",
                                                                 num_draft_tokens=4)})
    results = Results.model_validate(json.loads(synthetic.results_json(results)))  # through the real schema
    checks = synthetic.checks_for(results)
    t = analyze_traffic(results, CFG, 500)
    checks = ChecksDoc.model_validate({**checks.model_dump(mode="json", by_alias=True),
                                       "traffic": t.model_dump(mode="json"),
                                       "verdicts": [*checks.model_dump(mode="json")["verdicts"],
                                                    *[v.model_dump(mode="json") for v in verdicts_for(t)]]})
    return results, checks


def test_a_slower_engine_at_load_fails_against_the_baseline_and_the_comment_shows_the_percentiles(base_sweep,
                                                                                                   tmp_path):
    from gate.report.render import build_page, render_comment, write_png

    cfg = synthetic.config()
    base_results, base_checks = gate_docs(base_sweep)
    baseline = synthetic.baseline_of(base_results, base_checks, cfg)
    assert set(baseline.traffic["vllm"]) == {"1", "4", "16", "64"} and len(baseline.traffic["vllm"]["4"].samples) == 48
    reloaded = type(baseline).model_validate(json.loads(baseline.model_dump_json(by_alias=True)))
    assert reloaded.traffic == baseline.traffic

    same = synthetic.judge(base_results, base_checks, cfg, baseline)
    assert same.outcome == "pass" and any(c.check == "traffic" and c.status == "pass" for c in same.checks)

    head_results, head_checks = gate_docs(sweep(slowdown=1.4))  # every engine step 40% slower
    v = synthetic.judge(head_results, head_checks, cfg, baseline)
    assert v.outcome == "fail" and "latency speedup drops" in v.headline
    fails = [c for c in v.checks if c.check == "traffic" and c.status == "fail"]
    assert fails and all("beyond the 5% tolerance" in c.why or "tolerance" in c.why for c in fails)
    assert any(c.check == "traffic" and "now stops paying at" in c.why for c in v.checks)
    low = next(c for c in v.traffic if c.rate == 1)
    assert low.status == "fail" and low.ratio.high < 0.9

    text = render_comment(build_page(head_results, head_checks, v, baseline, "demo"))
    assert "### Request-rate load" in text and "TTFT p50 / p99 (ms)" in text
    assert "speculation stops paying at about" in text and "❌" in text
    assert "| 64 |" in text and "saturated" in text
    import io

    from rich.console import Console

    from gate.report.render import print_terminal

    log = io.StringIO()
    print_terminal(v, Console(file=log, force_terminal=False, width=200))
    assert "traffic vllm 1 req/s: latency speedup 1.6" in log.getvalue() and " fail" in log.getvalue()
    assert write_png(head_checks, tmp_path / "speedup.png") is None
    assert (tmp_path / "speedup.png").read_bytes()[:4] == b"\x89PNG"


def test_replays_are_logged_as_they_finish_and_read_back(tmp_path, base_sweep):
    from gate.run.records import RecordLog
    from gate.run.results import SCHEMA, RunHeader

    results = synthetic.run()
    header = RunHeader.model_validate({**results.model_dump(include=set(RunHeader.model_fields)),
                                       "schema_id": SCHEMA})
    log = RecordLog(tmp_path / "records.jsonl")
    log.start(header)
    for r in base_sweep[:3]:
        log.append(r)
    log.close()
    with open(tmp_path / "records.jsonl", "a") as fh:
        fh.write('{"kind": "traffic", "engine": "vl')  # a crash mid-write
    header, executions, traffic = read_log(tmp_path / "records.jsonl")
    assert header is not None and executions == [] and traffic == base_sweep[:3]


# --- config ----------------------------------------------------------------------------------------


def test_traffic_needs_an_http_engine_with_a_reference_and_increasing_rates():
    from gate.errors import ConfigError
    from gate.inputs.config import parse_config

    base = 'models: {target: {path: org/t}, draft: {path: org/d}}\n'
    with pytest.raises(ConfigError) as err:
        parse_config(base + "checks: {traffic: {rates: [1, 2]}}\n", "x.yaml")
    assert "an http engine with http.reference" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config(base + "checks: {traffic: {rates: [4, 2]}}\n", "x.yaml")
    assert "strictly increasing" in str(err.value) and "checks.traffic.rates" in str(err.value)


# --- the HTTP path, in real time, against a scripted server ----------------------------------------


def scripted_app(tokens_per_event: int, step_s: float, extra: int = 0):
    """llama-server's native stream, scripted: ``max_tokens`` ids (plus ``extra``: a server that ignores the
    budget), ``tokens_per_event`` per event."""
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.post("/completions")
    def completions(body: dict):
        n = int(body["max_tokens"]) + extra

        def events():
            for i in range(0, n, tokens_per_event):
                time.sleep(step_s)
                ids = list(range(i, min(n, i + tokens_per_event)))
                yield f"data: {json.dumps({'tokens': ids, 'content': 'x' * len(ids), 'stop': False})}\n\n"
            yield f"data: {json.dumps({'tokens': [], 'content': '', 'stop': True, 'stop_type': 'limit'})}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def test_the_http_sender_replays_a_trace_to_a_real_server_in_real_time():
    from gate import stacks
    from gate.engines.base import GenerationSettings
    from gate.engines.http import HttpEngine
    from gate.run.traffic import BURST_S, http_sender
    from gate.testing.server import in_thread

    # Three events of three tokens, 30 ms apart: two gaps between bursts, never eight token-to-token ones.  Under
    # load the client's thread can read two events in one go (CI once saw one gap of 2.6 ms where two were sent
    # 2 ms apart): each request sees at most two gaps, and most see both.
    with in_thread(scripted_app(3, 0.03), free_port()) as url:
        engine = HttpEngine("llamacpp", url, stacks.get("llamacpp"), speculative=True, metrics_path=None)
        trace = make_trace([P(p.id, p.slice, p.prompt_ids, 9) for p in PROMPTS], 50.0, 10, "poisson", 1)
        reqs, duration, cut = replay(trace, http_sender(engine, GenerationSettings(0.0, 4, ())))
    assert cut is None and duration > 0
    for a, r in zip(trace, reqs):
        assert r.error is None and r.tokens == 9 and r.prompt_id == a.prompt.id
        assert r.sent_s >= r.scheduled_s - 1e-3 and r.sent_s < r.first_token_s <= r.end_s <= duration
        assert 1 <= len(r.gaps_s) <= 2 and min(r.gaps_s) >= BURST_S, r.gaps_s
    assert sum(len(r.gaps_s) == 2 for r in reqs) >= len(reqs) // 2, [r.gaps_s for r in reqs]


def test_tokens_streamed_microseconds_apart_are_one_burst_for_the_inter_token_latency():
    """llama-server streams a verified run token by token, microseconds apart; vLLM sends it as one chunk: both give
    the same gaps (between bursts), never near-zero ITLs."""
    def burst(a):
        return Sent(a.at_s, [a.at_s + x for x in (0.1, 0.1001, 0.1003, 0.15, 0.1502, 0.2)], 6)

    reqs, _, _ = replay(make_trace(PROMPTS, 10.0, 2, "constant", 0), burst, FakeClock())
    assert [pytest.approx(g, abs=1e-5) for g in reqs[0].gaps_s] == [0.0497, 0.0498]
    assert reqs[0].tokens == 6 and reqs[0].first_token_s == pytest.approx(0.1)


def test_an_interrupted_replay_stops_at_once_and_cuts_off_the_requests_in_flight():
    """Ctrl-C (or the runner's SIGTERM) mid-replay: no request after it is sent, the in-flight ones are aborted,
    and the interrupt goes up to the runner, which keeps the replays already finished."""
    release, aborted, sent = threading.Event(), [], []

    class Interrupting(FakeClock):
        calls = 0

        def sleep_until(self, t):
            super().sleep_until(t)
            self.calls += 1
            if self.calls == 4:  # before the fourth request is sent
                raise KeyboardInterrupt

    def slow(a):
        sent.append(a)
        release.wait(10)  # a long generation, cut off by abort()
        return Sent(a.at_s, [], 0, "aborted")

    def abort():
        aborted.append(True)
        release.set()

    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        replay(make_trace(PROMPTS, 10.0, 8, "constant", 0), slow, Interrupting(), abort=abort)
    assert aborted == [True] and len(sent) <= 3 and time.monotonic() - began < 5


def test_an_interrupt_cuts_off_http_streams_in_flight_at_their_next_chunk():
    from gate import stacks
    from gate.engines.base import GenerationSettings
    from gate.engines.http import HttpEngine
    from gate.run.traffic import WallClock, http_sender
    from gate.testing.server import in_thread

    class Interrupting(WallClock):
        calls = 0

        def sleep_until(self, t):
            super().sleep_until(t)
            self.calls += 1
            if self.calls == 3:
                raise KeyboardInterrupt

    with in_thread(scripted_app(1, 0.05), free_port()) as url:  # 200 tokens at 20 a second: 10 s a request
        engine = HttpEngine("llamacpp", url, stacks.get("llamacpp"), speculative=True, metrics_path=None)
        trace = make_trace([P(p.id, p.slice, p.prompt_ids, 200) for p in PROMPTS], 20.0, 6, "constant", 1)
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            replay(trace, http_sender(engine, GenerationSettings(0.0, 4, ())), Interrupting(),
                   abort=engine.cancel)
        stopped = time.monotonic() - began
        while any(t.name.startswith("traffic") for t in threading.enumerate()) and time.monotonic() - began < 10:
            time.sleep(0.02)
        # bounds far from the 10 s a request takes, and loose for a loaded machine
        assert stopped < 3 and not any(t.name.startswith("traffic") for t in threading.enumerate())
        assert time.monotonic() - began < 5  # the two requests in flight stopped at their next chunk, not after 10 s


def test_paired_mode_replays_the_same_traces_to_the_base_and_judges_head_against_it():
    """--against with checks.traffic: the base config's server gets every trace too (each side first in turn); the
    verdict holds base latency / head latency of each request to the speedup rule."""
    assert sides(0, True) == ("engine", "reference", "base") and sides(1, True) == ("reference", "base", "engine")
    cfg = synthetic.config()
    same_results, same_checks = gate_docs(sweep(base_slowdown=1.0), paired=True)
    rate = same_checks.traffic.engines["vllm"].rates["4"]
    assert rate.base.completed == 48 and rate.base_speedup.estimate == pytest.approx(rate.speedup.estimate)
    same = synthetic.judge(same_results, same_checks, cfg)
    assert same.mode == "paired" and same.outcome == "pass"
    assert [c.ratio.estimate for c in same.traffic] == [1.0] * 4  # the simulation is exact: every request alike
    worse_results, worse_checks = gate_docs(sweep(base_slowdown=0.7), paired=True)  # the base is 30% faster
    v = synthetic.judge(worse_results, worse_checks, cfg)
    assert v.outcome == "fail" and all(c.status == "fail" and c.ratio.high < 0.9 for c in v.traffic)
    assert any("paired with the base on the same traces" in c.why for c in v.checks if c.check == "traffic")


@pytest.mark.parametrize("extra,budget,timeout,message", [(5, 5, 30.0, "streamed 6 tokens for max_tokens 5"),
                                                          (0, 100_000, 0.5, "still streaming after 0 s")])
def test_a_server_that_ignores_the_budget_or_never_ends_fails_its_request(extra, budget, timeout, message):
    """The read timeout is per chunk: a stream that goes on forever, or past max_tokens, is cut off and named."""
    from gate import stacks
    from gate.engines.base import GenerationSettings, Request
    from gate.engines.http import HttpEngine
    from gate.errors import EngineFailure
    from gate.testing.server import in_thread

    with in_thread(scripted_app(1, 0.01, extra), free_port()) as url:
        engine = HttpEngine("llamacpp", url, stacks.get("llamacpp"), speculative=True, metrics_path=None,
                            timeout_s=timeout)
        began = time.monotonic()
        with pytest.raises(EngineFailure) as err:
            engine.stream(Request((1, 2, 3), budget), GenerationSettings(0.0, 4, ()))
    assert message in err.value.message and time.monotonic() - began < 5


def test_a_sweep_that_would_take_hours_per_replay_is_refused_at_load():
    from gate.errors import ConfigError
    from gate.inputs.config import parse_config

    text = """\
models: {target: {path: org/t}, draft: {path: org/d}, local_weights: false}
checks: {traffic: {rates: [0.001, 1], requests: 1000}}
engines:
  - {type: http, http: {server: {url: "http://127.0.0.1:9"}, reference: {url: "http://127.0.0.1:10"}}}
"""
    with pytest.raises(ConfigError) as err:
        parse_config(text, "x.yaml")
    assert "at 0.001 req/s, 1000 requests take about 999,000 s per replay" in str(err.value)

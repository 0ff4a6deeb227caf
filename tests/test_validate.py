"""`validate` proves what `plan` and `gate` will need (issue 40, item 4), with no weights loaded: the tokenizers
load, every chat row renders, each launch executable is found, a launch line written as one string gets the list
form as its fix, and a problem found on many rows prints once with its count.  Each config here passed `validate`
before ("OK (24 prompts in 3 slices...)") and then failed `plan`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gate.cli import main
from gate.inputs.config import PACKAGE_DIR

HEAD = """\
version: 1
models:
  target: {path: "%(target)s"}
  draft: {path: "specguard:demo/draft"}
  device: cpu
suite: {max_prompts_per_slice: 2%(suite)s}
output: {cache_dir: null}
engines:
%(engines)s
"""
SPECULATIVE = "  - type: speculative"


def write(tmp_path, target="specguard:demo/target", suite="", engines=SPECULATIVE) -> str:
    path = tmp_path / "specguard.yaml"
    path.write_text(HEAD % {"target": target, "suite": suite, "engines": engines})
    return str(path)


def both(capsys, config: str) -> list[tuple[int, str]]:
    """validate's and plan's exit codes and what each printed."""
    out = []
    for command in ("validate", "plan"):
        code = main([command, config])
        said = capsys.readouterr()
        out.append((code, said.out + said.err))
    return out


def test_a_target_without_tokenizer_files_fails_validate_as_it_fails_plan(tmp_path, capsys):
    target = tmp_path / "target"
    shutil.copytree(PACKAGE_DIR / "demo" / "target", target)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (target / name).unlink()
    (validated, v_said), (planned, p_said) = both(capsys, write(tmp_path, target=str(target)))
    assert validated == planned == 2, (v_said, p_said)
    assert "cannot load the target tokenizer" in v_said and "cannot load the target tokenizer" in p_said


def test_a_chat_suite_that_cannot_render_is_one_error_with_its_count(tmp_path, capsys):
    chats = tmp_path / "chats.jsonl"
    chats.write_text("".join(json.dumps({"id": f"c{i}", "slice": "chat", "messages": [
        {"role": "user", "content": f"question {i}"}]}) + "\n" for i in range(5)))
    (code, said), (planned, _) = both(capsys, write(tmp_path, suite=f", path: {json.dumps(str(chats))}"))
    assert code == planned == 2, said
    lines = [line for line in said.splitlines() if "rendering them failed" in line]
    assert len(lines) == 1 and "2 prompts ('c0', 'c1')" in lines[0], said  # max_prompts_per_slice: 2


def test_a_launch_line_written_as_a_string_gets_the_list_form_as_its_fix(tmp_path, capsys):
    engines = """\
  - type: http
    name: stack
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:9", launch: "vllm serve org/model --port 9"}"""
    (code, said), _ = both(capsys, write(tmp_path, engines=engines))
    assert code == 2 and 'write it as ["vllm", "serve", "org/model", "--port", "9"]' in said, said


def test_a_launch_executable_missing_here_is_a_warning_validate_and_plan_both_print(tmp_path, capsys):
    engines = """\
  - type: http
    name: stack
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:9", launch: [no-such-server-binary, --port, "9"]}
      reference: {url: "http://127.0.0.1:10"}"""
    (code, said), (planned, p_said) = both(capsys, write(tmp_path, engines=engines))
    warning = "engines[0].http.server.launch[0]: 'no-such-server-binary' is not an executable on this runner"
    assert code == planned == 0 and warning in said and warning in p_said, (said, p_said)


@pytest.mark.parametrize("times", [1, 3])
def test_the_same_problem_found_many_times_prints_once_with_its_count(times):
    from gate.errors import Problem, distinct, said

    found = distinct([Problem("a.yaml", "the same fault", field="x")] * times + [Problem("a.yaml", "another")])
    lines = [said(p, n) for p, n in found]
    assert len(lines) == 2 and lines[0].endswith("the same fault" + (f" (x{times})" if times > 1 else "")), lines


GPU_PAIR = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cuda,
         local_weights: false}
engines:
  - type: http
    name: stack
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:9", launch: [vllm, serve, m, --port, "9"%(server)s]}
      reference: {url: "http://127.0.0.1:10", launch: [vllm, serve, m, --port, "10"%(reference)s]}
"""


@pytest.mark.parametrize("server,reference,warned", [
    ("", "", "0.9 + 0.9 = 1.80"),  # vLLM's default each: two servers cannot fit on one GPU
    (', --gpu-memory-utilization, "0.6"', ', --gpu-memory-utilization, "0.5"', "0.6 + 0.5 = 1.10"),
    (', --gpu-memory-utilization, "0.45"', ', --gpu-memory-utilization, "0.45"', None),
    (', --gpu-memory-utilization, "0.45"', "", "engines[0].http.reference.launch: the stack's default"),
])
def test_servers_sharing_a_gpu_are_warned_when_their_memory_fractions_cannot_fit(tmp_path, server, reference,
                                                                                 warned):
    """Issue 40 item 5: every launched server at once, each at vLLM's default 0.9, cannot fit on one GPU; the
    warning names each line and the flag that sets its share."""
    from types import SimpleNamespace

    from gate.inputs.config import parse_config
    from gate.run.estimate import warnings

    loaded = parse_config(GPU_PAIR % {"server": server, "reference": reference}, tmp_path / "gpu.yaml")
    said = [w for w in warnings(loaded, [], SimpleNamespace(batches=[], timing=[])) if "share GPU" in w]
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and warned in said[0] and "--gpu-memory-utilization" in said[0], said
        assert "engines[0].http.server.launch and engines[0].http.reference.launch" in said[0]


GPU_ENV = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cuda,
         local_weights: false}
engines:
  - type: http
    name: stack
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:9", launch: %(server)s, env: {CUDA_VISIBLE_DEVICES: "%(a)s"}}
      reference: {url: "http://127.0.0.1:10", launch: %(reference)s, env: {CUDA_VISIBLE_DEVICES: "%(b)s"}}
"""
VLLM_LINE = '[vllm, serve, m, --gpu-memory-utilization, "0.9"]'


@pytest.mark.parametrize("a,b,server,warned", [
    ("0,1,2,3", "2,3,4,5", VLLM_LINE, "share GPU(s) 2,3 and claim 0.9 + 0.9 = 1.80"),  # overlap, not equal strings
    ("0,1", "2,3", VLLM_LINE, None),  # disjoint: each server has its GPUs to itself
    ("0,1", "1", VLLM_LINE, "share GPU(s) 1 and claim"),
    ("0", "0", '[bash, -c, "./serve.sh"]', None),  # a line the gate cannot read makes no memory claim
])
def test_device_sets_are_compared_by_overlap_and_an_unread_line_claims_nothing(tmp_path, a, b, server, warned):
    """Issue 48, item 5: CUDA_VISIBLE_DEVICES "0,1,2,3" and "2,3,4,5" share two GPUs; a shell script's share is
    not guessed."""
    from types import SimpleNamespace

    from gate.inputs.config import parse_config
    from gate.run.estimate import warnings

    text = GPU_ENV % {"a": a, "b": b, "server": server, "reference": VLLM_LINE}
    said = [w for w in warnings(parse_config(text, tmp_path / "gpu.yaml"), [], SimpleNamespace(batches=[], timing=[]))
            if "share GPU" in w]
    if warned is None:
        assert said == [], said
    else:
        assert len(said) == 1 and warned in said[0], said


def test_paired_modes_three_servers_are_summed_on_the_gpus_they_share(tmp_path):
    """plan --against: the base's server runs beside the head's two; three at 0.45 on GPUs 0-3 claim 1.35."""
    from gate.run.estimate import launched_shares, memory_warnings

    line = '[vllm, serve, m, --gpu-memory-utilization, "0.45"]'
    from gate.inputs.config import parse_config

    head = parse_config(GPU_ENV % {"a": "0,1,2,3", "b": "0,1,2,3", "server": line, "reference": line},
                        tmp_path / "head.yaml")
    assert memory_warnings(launched_shares(head.config.engines)) == []  # 0.9 for the two: fits
    base = parse_config(GPU_ENV % {"a": "0,1,2,3", "b": "0,1,2,3", "server": line, "reference": line},
                        tmp_path / "base.yaml")
    said = memory_warnings(launched_shares(head.config.engines)
                           + launched_shares(base.config.engines, "base ", only_server=True))
    assert len(said) == 1 and "0.45 + 0.45 + 0.45 = 1.35" in said[0], said
    assert "base engines[0].http.server.launch" in said[0] and "base engines[0].http.reference" not in said[0]


@pytest.mark.parametrize("url,said", [
    ("http://127.0.0.1:{port}", "{port} is a placeholder of the launch line only"),
    ("http://127.0.0.1:99999", "a port from 1 to 65535"),
    ("http://127.0.0.1:http", "a port from 1 to 65535"),
])
def test_a_url_whose_port_cannot_be_read_is_exit_2_from_validate_and_plan_against_alike(tmp_path, capsys, url, said):
    """Issue 53, item 4: `{port}` in a url passed validate and ended `plan --against` in a ValueError traceback
    (urlsplit's port); the url is refused at load now, naming the file, the line and the field."""
    engines = f"""\
  - type: http
    name: stack
    http:
      preset: vllm
      server: {{url: "{url}", launch: [vllm, serve, m, --port, "{{port}}"]}}
      reference: {{url: "http://127.0.0.1:10"}}"""
    head = write(tmp_path, engines=engines)
    base = tmp_path / "base.yaml"
    base.write_text(Path(head).read_text().replace(url, "http://127.0.0.1:9"))
    for argv in (["validate", head], ["plan", head], ["plan", head, "--against", str(base)],
                 ["plan", str(base), "--against", head]):
        code = main(argv)
        printed = capsys.readouterr()
        text = printed.out + printed.err
        assert code == 2 and f"{head}:13: engines[0].http.server.url: " in text and said in text, (argv, text)

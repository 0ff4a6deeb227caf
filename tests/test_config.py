"""Config validation: every error names the file, the line, the dotted field path and what was expected."""

from __future__ import annotations

import pytest

from gate.cli import main
from gate.errors import ConfigError
from gate.inputs.config import parse_config

GOOD = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
"""


def problems(text: str) -> list:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "specguard.yaml")
    return info.value.problems


def only(text: str):
    found = problems(text)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def test_minimal_config_gets_defaults():
    cfg = parse_config(GOOD, "specguard.yaml").config
    assert cfg.speculation.num_draft_tokens == 4
    assert cfg.batching.batch_sizes == [1, 4, 8]
    assert cfg.models.trust_remote_code is False
    assert [e.type for e in cfg.engines] == ["speculative"]
    assert cfg.generation.greedy and cfg.generation.sampling is None


def test_wrong_type_names_file_line_and_path():
    p = only(GOOD + "speculation:\n  num_draft_tokens: many\n")
    assert p.field == "speculation.num_draft_tokens"
    assert p.source == "specguard.yaml" and p.line == 6
    assert "valid integer" in p.message and "'many'" in p.message
    assert str(p).startswith("specguard.yaml:6: speculation.num_draft_tokens: ")


def test_unknown_key_suggests_closest():
    p = only(GOOD + "speculation:\n  num_draft_token: 4\n")
    assert p.field == "speculation.num_draft_token"
    assert p.message == "unknown key"
    assert p.hint == "did you mean 'num_draft_tokens'?"


def test_unknown_top_level_key():
    p = only(GOOD + "batchng:\n  batch_sizes: [1]\n")
    assert p.field == "batchng" and p.hint == "did you mean 'batching'?"


def test_every_problem_reported_at_once():
    text = GOOD.replace('{path: "specguard:demo/draft"}', '{path: "x", dtype: fp8}') + (
        "batching:\n  batch_sizes: [0, 4]\n"
        "checks:\n  speedup: {ci_half_width: 2}\n"
    )
    fields = sorted(p.field for p in problems(text))
    assert fields == ["batching.batch_sizes[0]", "checks.speedup.ci_half_width", "models.draft.dtype"]


def test_missing_required_field():
    p = only("models:\n  target: {path: t}\n")
    assert p.field == "models.draft" and p.message == "required field is missing" and p.line == 1


def test_list_index_in_path_and_plugin_needs_callable():
    p = only(GOOD + "engines:\n  - type: speculative\n  - type: plugin\n")
    assert p.field == "engines[1].callable"
    assert "package.module:function" in p.message


def test_engine_type_is_checked():
    p = only(GOOD + "engines:\n  - type: vllm\n")
    assert p.field == "engines[0].type"
    assert "'speculative'" in p.message and "'vllm'" in p.message


def test_duplicate_engine_names():
    p = only(GOOD + "engines:\n  - type: speculative\n  - type: speculative\n")
    assert p.field == "engines" and "unique" in p.message


def test_sampling_or_greedy_required():
    p = only(GOOD + "generation:\n  greedy: false\n")
    assert p.field == "generation" and "nothing to generate" in p.message


def test_malformed_yaml_names_line():
    p = only(GOOD + "speculation:\n  num_draft_tokens: [4\n")
    assert p.source == "specguard.yaml" and p.line is not None and "not valid YAML" in p.message


def test_top_level_must_be_mapping():
    p = only("- a\n- b\n")
    assert "expected a mapping" in p.message


def test_trust_remote_code_must_be_bool():
    p = only(GOOD.replace('models:\n', 'models:\n  trust_remote_code: "yes please"\n'))
    assert p.field == "models.trust_remote_code"


def test_validate_cli_ok(tmp_path, capsys):
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(GOOD)
    assert main(["validate", str(cfg)]) == 0
    assert "OK" in capsys.readouterr().out


def test_validate_cli_prints_every_problem(tmp_path, capsys):
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(GOOD.replace("specguard:demo/draft", "./no/such/draft") + "generation:\n  max_new_token: 3\n")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "models.draft.path: model directory" in err and "does not exist" in err
    assert "generation.max_new_token: unknown key (did you mean 'max_new_tokens'?)" in err


def test_validate_cli_missing_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_validate_reports_suite_problems(tmp_path, capsys):
    suite = tmp_path / "s.jsonl"
    suite.write_text('{"id": "a", "slice": "x", "prompt": "hi"}\n{"id": "b", "slice": "x"}\n')
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(GOOD + f"suite:\n  path: {suite}\n")
    assert main(["validate", str(cfg)]) == 2
    assert f"{suite}:2: prompt: required field is missing" in capsys.readouterr().err


def test_demo_config_is_valid(capsys):
    from gate.cli import DEMO_CONFIG

    assert main(["validate", str(DEMO_CONFIG)]) == 0


def test_sampling_batch_sizes_must_be_configured_sizes():
    p = only(GOOD + "batching: {batch_sizes: [1, 4]}\ngeneration:\n  sampling: {batch_sizes: [8]}\n")
    assert p.field == "generation.sampling.batch_sizes" and p.line == 7
    assert p.message == "expected a subset of batching.batch_sizes [1, 4], got [8]"


@pytest.mark.parametrize("name", ["reference", "Reference", "gate", "base-speculative", "inhouse.reference"])
def test_engine_names_the_gate_uses_are_reserved(name):
    """Bug: a plug-in named 'reference' merged its records with the real reference's."""
    p = only(GOOD + f"engines:\n  - {{type: plugin, name: {name}, callable: 'm:f'}}\n")
    assert p.field == "engines[0].name" and "reserved" in p.message and p.line == 6


def test_plugin_options_only_on_plugins():
    cfg = parse_config(GOOD + "engines:\n  - {type: plugin, name: x, callable: 'm:f', max_batch_size: 4, "
                              "extra: {port: 8000}}\n", "s.yaml").config
    assert cfg.engines[0].extra == {"port": 8000} and cfg.engines[0].max_batch_size == 4
    p = only(GOOD + "engines:\n  - {type: speculative, extra: {a: 1}}\n")
    assert p.field == "engines[0].extra" and "only plugin engines take 'extra'" in p.message


def test_a_plugins_own_reference_is_the_same_callable_with_speculation_off_or_another_callable():
    """Issue 32: a plug-in is timed against its own plain decoding; the config says which, and only one way."""
    plugin = "engines:\n  - {type: plugin, name: x, callable: 'm:f', reference: %s}\n"
    cfg = parse_config(GOOD + plugin % "{num_draft_tokens: 0}", "s.yaml").config
    assert cfg.engines[0].reference.num_draft_tokens == 0 and cfg.engines[0].reference.callable is None
    cfg = parse_config(GOOD + plugin % "{callable: 'm:plain', extra: {mode: eager}}", "s.yaml").config
    assert cfg.engines[0].reference.callable == "m:plain" and cfg.engines[0].reference.extra == {"mode": "eager"}
    for bad, said in (("{}", "either 'num_draft_tokens: 0'"), ("{num_draft_tokens: 0, callable: 'm:g'}", "not both"),
                      ("{num_draft_tokens: 3}", "expected 0"), ("{num_draft_tokens: 0, extra: {a: 1}}",
                                                                  "'extra' goes with 'callable'"),
                      ("{callable: 'not a callable'}", "expected 'package.module:function'")):
        p = only(GOOD + plugin % bad)
        assert p.field.startswith("engines[0].reference") and said in p.message, (bad, str(p))
    p = only(GOOD + "engines:\n  - {type: speculative, reference: {num_draft_tokens: 0}}\n")
    assert "only plugin engines take 'reference'" in p.message and "the gate's reference" in p.message
    # a config without it keeps its digest: the field is left out of the dump while unset
    assert "reference" not in parse_config(GOOD + "engines:\n  - {type: plugin, name: x, callable: 'm:f'}\n",
                                           "s.yaml").config.model_dump(mode="json")["engines"][0]


def test_an_http_reference_that_is_the_engine_under_test_is_refused():
    p = only(GOOD + "engines:\n  - type: http\n    http:\n      server: {url: 'http://127.0.0.1:8000'}\n"
                    "      reference: {url: 'http://127.0.0.1:8000/'}\n")
    assert p.field == "engines[0].http.reference.url" and "every output would equal itself" in p.message


def test_credentials_in_an_http_url_are_refused_without_echoing_them():
    p = only(GOOD + "engines:\n  - type: http\n    http:\n      server: {url: 'http://me:hunter2@10.0.0.1:8000'}\n"
                    "      reference: {url: 'http://10.0.0.1:8001'}\n")
    assert p.field == "engines[0].http.server.url" and "api_key_env" in p.message
    assert "hunter2" not in str(p)

"""Baselines on disk: refresh, history, atomic writes, refusal, unusable baselines (exit 3), and schemas."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
import synthetic as syn
import yaml

from gate import schemas
from gate.cli import main
from gate.verdict.baseline import load_baseline
from gate.verdict.store import BaselineStore

ROOT = Path(__file__).resolve().parent.parent

CONFIG_WITH_BASELINE_DIR = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
baseline: {dir: perf/baselines}
"""


def write_run(run_dir: Path, results=None, checks=None) -> Path:
    results = results or syn.run()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(syn.results_json(results))
    (run_dir / "checks.json").write_text(syn.checks_json(checks or syn.checks_for(results)))
    return run_dir


def write_config(path: Path) -> Path:
    path.write_text(yaml.safe_dump(syn.config().model_dump(mode="json")))
    return path


@pytest.fixture()
def repo(tmp_path):
    cfg = write_config(tmp_path / "specguard.yaml")
    run = write_run(tmp_path / "out")
    return tmp_path, cfg, run


def test_refresh_writes_a_compact_baseline_without_local_paths(repo, capsys):
    root, cfg, run = repo
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    path = root / "baselines" / "demo" / "cpu-test-cpu-2c-2t.json"
    assert f"wrote {path}" in capsys.readouterr().out
    text = path.read_text()
    assert "/runner" not in text and str(root) not in text, "no runner-local paths in a committed baseline"
    b = load_baseline(path)
    assert b.fingerprint.models["target"].name == "org/target" and b.fingerprint.models["draft"].fingerprint
    assert b.acceptance["speculative"]["4"]["code"].mean_accepted_length == 3.0
    assert len(b.speedup["speculative"]["code|4|0-127"].samples) == 6
    jsonschema.validate(json.loads(text), schemas.load("baseline"))


class _Later(datetime):
    """The baseline's clock, an hour on: created_utc has one-second resolution, and no test waits for it."""

    @classmethod
    def now(cls, tz=None):
        return datetime.now(tz) + timedelta(hours=1)


def test_a_second_refresh_keeps_history_and_history_prints_the_trend(repo, capsys, monkeypatch):
    import gate.verdict.refresh

    root, cfg, run = repo
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    monkeypatch.setattr(gate.verdict.refresh, "datetime", _Later)
    write_run(run, syn.run(accepted={("code", 4): 1}, speedup={("code", 4): 1.2}))
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    hist = list((root / "baselines" / "demo" / "history" / "cpu-test-cpu-2c-2t").glob("*.json"))
    assert len(hist) == 1
    capsys.readouterr()
    assert main(["baseline", "history", "demo", "--dir", str(root / "baselines")]) == 0
    out = capsys.readouterr().out
    assert "2 refresh(es)" in out
    code = next(line for line in out.splitlines() if "acceptance  code (bs 1)" in line)
    assert code.split()[-2:] == ["3.00", "3.00"]
    assert next(line for line in out.splitlines() if "speedup     code (bs 4)" in line).split()[-2:] == \
        ["1.50x", "1.20x"]


def test_history_keeps_the_last_n(tmp_path):
    store = BaselineStore(tmp_path, "demo", keep=2)
    base = syn.baseline_of(syn.run(), syn.checks_for(syn.run()), syn.config())
    for i in range(5):
        store.write(base.model_copy(update={"created_utc": f"2026-11-0{i + 1}T00:00:00Z"}))
    assert len(list(store.history_dir(base.hardware_key).glob("*.json"))) == 2
    assert [b.created_utc[:10] for b in store.history()] == ["2026-11-03", "2026-11-04", "2026-11-05"]


def test_refresh_from_a_failing_run_is_refused_unless_forced(repo, capsys):
    root, cfg, run = repo
    r = syn.run()
    write_run(run, r, syn.checks_for(r, confident={4: 2}))
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 1
    assert "refusing to make a baseline of a run that fails equivalence (speculative, batch size 4)" in \
        capsys.readouterr().err
    assert not (root / "baselines").exists()
    assert main(["baseline", "refresh", str(cfg), "--from", str(run), "--force"]) == 2  # --force needs --reason
    assert main(["baseline", "refresh", str(cfg), "--from", str(run), "--force", "--reason", "known flake"]) == 0
    b = load_baseline(root / "baselines" / "demo" / "cpu-test-cpu-2c-2t.json")
    assert b.forced.reason == "known flake" and b.forced.failing


def test_refresh_refuses_a_run_of_another_config(repo, capsys):
    _, cfg, run = repo
    cfg.write_text(cfg.read_text().replace("num_draft_tokens: 4", "num_draft_tokens: 5"))
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 2
    err = capsys.readouterr().err  # the one rule of `check` too (gate.inputs.identity)
    assert "these results were not made with this config: config (its settings differ" in err, err


def _compare(run, root):
    return main(["compare", str(run), "--baselines-dir", str(root / "baselines"), "--quiet"])


@pytest.mark.parametrize("damage,message", [
    (lambda p: p.write_text("{ not json"), "corrupt baseline (not valid JSON"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "schema": "specguard.baseline/0"})),
     "baseline schema 'specguard.baseline/0', but this specguard reads 'specguard.baseline/1'"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "speedup": "fast"})),
     "speedup: corrupt baseline"),
])
def test_an_unusable_baseline_exits_3_and_is_left_untouched(repo, capsys, damage, message):
    root, cfg, run = repo
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    path = root / "baselines" / "demo" / "cpu-test-cpu-2c-2t.json"
    damage(path)
    before = path.read_bytes()
    capsys.readouterr()
    assert _compare(run, root) == 3
    err = capsys.readouterr().err
    assert message in err and str(path) in err and "refresh" in err
    assert path.read_bytes() == before
    assert not (run / "verdict.json").exists()


@pytest.mark.parametrize("change,message", [
    (lambda d: d["fingerprint"]["suite"].update(fingerprint="0ther"), "the suite changed since the baseline"),
    (lambda d: d["settings"].update(num_draft_tokens=6), "k changed 6 → 4"),
])
def test_a_baseline_for_another_suite_or_k_is_compared_not_refused(repo, capsys, change, message):
    root, cfg, run = repo
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    path = root / "baselines" / "demo" / "cpu-test-cpu-2c-2t.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    assert _compare(run, root) == 0
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["mode"] == "stored" and any(message in c["why"] for c in verdict["checks"])


def test_a_baseline_of_other_hardware_is_never_picked(repo, capsys):
    """No mtime fallback: another key's baseline is named in the verdict, not used."""
    root, cfg, run = repo
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    path = root / "baselines" / "demo" / "cpu-test-cpu-2c-2t.json"
    path.rename(path.with_name("cuda-nvidia-h100.json"))
    assert _compare(run, root) == 0
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["outcome"] == "neutral" and verdict["baseline"] is None
    assert any("baselines exist for cuda-nvidia-h100" in c["why"] for c in verdict["checks"])


def test_compare_writes_verdict_comment_and_summary_that_match_their_schemas(repo):
    root, cfg, run = repo
    assert _compare(run, root) == 0  # no baseline yet: neutral
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["outcome"] == "neutral" and verdict["mode"] == "none"
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    assert _compare(run, root) == 0
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["outcome"] == "pass" and verdict["baseline"]["same_hardware"] is True
    assert (run / "comment.md").read_text().rstrip().endswith("<!-- specguard:demo -->")
    assert "## Details" in (run / "summary.md").read_text()
    for name, doc in (("verdict", verdict), ("results", json.loads((run / "results.json").read_text())),
                      ("checks", json.loads((run / "checks.json").read_text()))):
        jsonschema.validate(doc, schemas.load(name))


def test_committed_schemas_are_current():
    proc = subprocess.run([sys.executable, "scripts/make_schemas.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_refresh_killed_at_any_point_leaves_the_old_baseline_intact(repo):
    """SIGKILL the refresh subprocess at delays spread over its life: the baseline is always old or new, whole."""
    root, cfg, run = repo
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    path = root / "baselines" / "demo" / "cpu-test-cpu-2c-2t.json"
    old = load_baseline(path).created_utc
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "gate", "baseline", "refresh", str(cfg), "--from", str(run)]
    t0 = time.monotonic()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    full = time.monotonic() - t0
    seen = set()
    for i in range(10):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(full * i / 9)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        b = load_baseline(path)  # never corrupt, never missing
        seen.add(b.created_utc)
    # every read found a whole baseline: the old one or a newer refresh, never a torn or missing file
    assert seen and min(seen) >= old, (old, seen)
    assert all(load_baseline(p).name == "demo" for p in path.parent.glob("history/*/*.json"))


def test_the_committed_demo_baseline_is_valid_compact_and_portable():
    from gate.inputs.config import load_config

    committed = sorted((Path(__file__).parent.parent / "baselines" / "demo").glob("*.json"))
    assert committed, "make demo compares with baselines/demo/<hardware>.json"
    demo = load_config(Path(__file__).parent.parent / "gate" / "demo" / "specguard.yaml")
    for path in committed:
        text = path.read_text()
        assert len(text.encode()) < 200_000
        jsonschema.validate(json.loads(text), schemas.load("baseline"))
        b = load_baseline(path)
        assert b.fingerprint.config == demo.config.digest(), \
            f"{path} is stale: refresh it with `make demo-baseline`"
        assert not any(s in text for s in ("/work/", "/home/", "/tmp/", "/root/", "/runner")), "runner-local path"
        assert b.fingerprint.suite.name == "specguard:suites/default.jsonl"


def test_every_command_finds_baselines_by_one_rule(tmp_path, monkeypatch):
    """Issue 21: `compare --baselines-dir` and `baseline history --dir` defaulted to ./baselines while `gate`
    used the config's baseline.dir, so two commands on one config could read different baselines."""
    from gate.verdict.store import baselines_root

    cfg = tmp_path / "repo" / "specguard.yaml"
    cfg.parent.mkdir()
    cfg.write_text(CONFIG_WITH_BASELINE_DIR)
    monkeypatch.chdir(tmp_path)
    assert baselines_root("elsewhere", str(cfg)) == Path("elsewhere")
    assert baselines_root(None, str(cfg)).resolve() == (cfg.parent / "perf" / "baselines").resolve()
    assert baselines_root(None) == Path("baselines")


def test_a_cells_speedup_ci_is_the_checks_own_not_a_second_bootstrap():
    """Issue 21: speedup CIs were bootstrapped twice (2000 resamples in the check, 1000 in the baseline), so one
    report could show two intervals for one cell.  The baseline and the comparison read the check's."""
    from gate.checks.speedup import analyze_speedup
    from gate.verdict.baseline import speedup_cells

    run = syn.run()
    speed = analyze_speedup(run, resamples=300)  # not the default: a recomputation would differ
    cells = speedup_cells(run, syn.checks_for(run).model_copy(update={"speedup": speed}))
    compared = 0
    for engine, rows in speed.engines.items():
        for key, cell in rows.cells.items():
            mine = cells[engine][key]
            if cell.speedup.n > 1:
                assert (mine.estimate, mine.low, mine.high) == (cell.speedup.estimate, cell.speedup.low,
                                                                cell.speedup.high)
                compared += 1
    assert compared, "the synthetic run has timed cells"
    alone = speedup_cells(run)  # no checks document: bootstrapped here, with the check's default resamples
    default = analyze_speedup(run).engines
    assert all(alone[e][k].low == default[e].cells[k].speedup.low
               for e in alone for k in alone[e] if default[e].cells[k].speedup.n > 1)


def test_refresh_and_compare_find_one_baseline_by_one_name_rule(tmp_path, capsys):
    """Issue 30 item 16: `baseline refresh tiny.yaml --from RUN --dir B` wrote B/tiny/<hw>.json (the config's
    name), then `compare RUN --config tiny.yaml --baselines-dir B` looked for B/specguard/<hw>.json and said "no
    baseline 'this config'".  One rule names a baseline (gate.inputs.config.baseline_name); results.json records
    it."""
    from gate.inputs.config import BaselineConfig

    cfg = syn.config().model_copy(update={"baseline": BaselineConfig()})  # no baseline.name: the file's name rules
    r = syn.run().model_copy(update={"config": cfg, "run_id": "r1", "baseline_name": "tiny"})
    r.fingerprint.config = syn._digest(cfg)
    run = write_run(tmp_path / "out", r, syn.checks_for(r))
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    b = tmp_path / "B"
    assert main(["baseline", "refresh", str(tmp_path / "tiny.yaml"), "--from", str(run), "--dir", str(b)]) == 0
    written = sorted(p.relative_to(b).as_posix() for p in b.rglob("*.json"))
    assert written == [f"tiny/{r.fingerprint.hardware_key}.json"], written
    for args in (["--config", str(tmp_path / "tiny.yaml")], []):
        capsys.readouterr()
        assert main(["compare", str(run), "--baselines-dir", str(b), "-q", *args]) == 0
        verdict = json.loads((run / "verdict.json").read_text())
        assert verdict["mode"] == "stored" and verdict["baseline"]["name"] == "tiny", (args, verdict["checks"])
    nameless = r.model_copy(update={"baseline_name": None, "run_id": "r2"})  # a run from before the field existed
    run2 = write_run(tmp_path / "old", nameless, syn.checks_for(nameless))
    assert main(["compare", str(run2), "--baselines-dir", str(b), "-q"]) == 0
    why = next(c["why"] for c in json.loads((run2 / "verdict.json").read_text())["checks"] if c["check"] == "baseline")
    assert "no baseline 'specguard' for hardware" in why and "this config" not in why, why


@pytest.mark.parametrize("in_repository", [True, False])
def test_no_comment_or_summary_quotes_a_runners_absolute_path(repo, in_repository, monkeypatch):
    """Issue 39 item 7: the "no baseline" line quoted /…/baselines/<name>/<hardware>.json as the runner has it.
    It is named as the repository names it (relative to its root), and without a repository never absolutely."""
    root, cfg, run = repo
    if in_repository:
        (root / ".git").mkdir()
    monkeypatch.chdir("/")
    assert _compare(run, root) == 0  # no baseline: neutral
    for name in ("comment.md", "summary.md", "verdict.json"):
        text = (run / name).read_text()
        assert str(root).lstrip("/") not in text, name
    comment = (run / "comment.md").read_text()
    shown = "baselines/demo/cpu-test-cpu-2c-2t.json" if in_repository else "…/baselines/demo/cpu-test-cpu-2c-2t.json"
    assert f"({shown})" in comment, comment
    assert main(["baseline", "refresh", str(cfg), "--from", str(run)]) == 0
    assert _compare(run, root) == 0
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["baseline"]["path"] == shown

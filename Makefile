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

.PHONY: demo demo-full demo-baseline test lint selftest clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH_CPU)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/specguard demo --threads 2

# The whole default suite, assisted generation included (about 10 minutes on 2 cores).
demo-full: $(VENV)/.installed
	$(BIN)/specguard gate gate/demo/specguard-full.yaml --out specguard-out-full --threads 2

# Refresh the committed demo baseline from the last `make demo` (baselines/demo/<hardware>.json).
demo-baseline: $(VENV)/.installed
	$(BIN)/specguard baseline refresh gate/demo/specguard.yaml --from specguard-out --dir baselines

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/zizmor --offline --quiet action.yml .github/workflows action/workflows/*.yml

selftest: $(VENV)/.installed
	$(BIN)/specguard selftest --threads 2

clean:
	rm -rf specguard-out .specguard-cache .pytest_cache

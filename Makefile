# Two commands do all set-up on a fresh machine: `make serve` and `make test`.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.agentserve-installed

.PHONY: install model harnesses serve test test-unit test-integration test-e2e bench

$(STAMP): pyproject.toml $(wildcard requirements/*.txt) scripts/install.sh
	bash scripts/install.sh

install: $(STAMP)

model: install
	$(PY) -m agentserve.cli prepare-model

harnesses:
	bash scripts/install_harnesses.sh

serve: model
	$(VENV)/bin/serve run serve_config.yaml

test: model harnesses
	$(PY) -m pytest tests -q -p no:cacheprovider

test-unit: install
	$(PY) -m pytest tests/unit -q

test-integration: model
	$(PY) -m pytest tests/integration -q

test-e2e: model harnesses
	$(PY) -m pytest tests/e2e -q

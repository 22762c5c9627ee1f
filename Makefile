# Two commands do all set-up on a fresh machine: `make serve` and `make test`.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.agentserve-installed

.PHONY: install model adapter harnesses serve test test-unit test-integration test-e2e test-harness-latest compatibility bench

$(STAMP): pyproject.toml $(wildcard requirements/*.txt) scripts/install.sh
	bash scripts/install.sh

install: $(STAMP)

model: install
	$(PY) -m agentserve.cli prepare-model

# The demo LoRA adapter the e2e tests serve (~2 min of CPU training, once per checkpoint): set-up, not test time;
# `make serve` does not need it.
adapter: model
	$(PY) -m agentserve.cli prepare-adapter

harnesses:
	bash scripts/install_harnesses.sh

# `make serve`: `serve run $(SERVE_CONFIG)` in a Ray instance started with agentserve/serve/ray_env.py's variables (the
# ones tests, benchmarks and KubeRay pods share: Serve's throughput-optimized mode and less periodic work at rest),
# and Ray's dashboard on 127.0.0.1:$(SERVE_DASHBOARD_PORT): the Serve tab's deployments, replicas and logs, and the REST
# API `serve deploy` and `serve status` use (docs/OPERATIONS.md, "The Ray dashboard"; its cost at rest:
# docs/BENCHMARKS.md, "At rest and start-up"). It accepts jobs, which is code execution: it never listens beyond
# this machine. SERVE_DASHBOARD=False leaves it out (`serve run` itself has no switch for it, hence the ray.init).
SERVE_CONFIG         ?= serve_config.yaml
SERVE_DASHBOARD      ?= True
SERVE_DASHBOARD_PORT ?= 8265
SERVE_ENV = $(shell $(PY) -m agentserve.serve.ray_env)

serve: model
	env $(SERVE_ENV) $(PY) -c 'import ray; ray.init(namespace="serve", include_dashboard=$(SERVE_DASHBOARD), dashboard_host="127.0.0.1", dashboard_port=$(SERVE_DASHBOARD_PORT)); from ray.serve.scripts import cli; cli(["run", "$(SERVE_CONFIG)"])'

# The unit tests need no cluster and run on two workers; the tests on the session's Ray cluster share it in order,
# in one process (tests/conftest.py). Their JUnit reports in .test-results/ feed docs/COMPATIBILITY.md.
RESULTS := .test-results
test: model adapter harnesses
	$(PY) -m pytest tests/unit -q -p no:cacheprovider -n 2 --durations=10 --junitxml=$(RESULTS)/unit.xml
	$(PY) -m pytest tests/integration tests/e2e -q -p no:cacheprovider --durations=15 --junitxml=$(RESULTS)/graph.xml

test-unit: install
	$(PY) -m pytest tests/unit -q -n 2

test-integration: model
	$(PY) -m pytest tests/integration -q

test-e2e: model adapter harnesses
	$(PY) -m pytest tests/e2e -q

# The harness CLIs' e2e tests against the npm registry's newest versions, installed into .harness-latest/ (the
# pinned ones in .harness/ stay as they are), then the compatibility matrix with both columns.
test-harness-latest: model adapter harnesses
	HARNESS_DIR=.harness-latest HARNESS_LATEST=1 bash scripts/install_harnesses.sh
	AGENTSERVE_HARNESS_DIR=$(CURDIR)/.harness-latest $(PY) -m pytest tests/e2e -q -p no:cacheprovider \
		-k "claude or codex or openclaw" --junitxml=$(RESULTS)/latest.xml || true
	$(PY) scripts/compatibility_matrix.py

# docs/COMPATIBILITY.md from the last `make test` (and `make test-harness-latest`, if run).
compatibility:
	$(PY) scripts/compatibility_matrix.py

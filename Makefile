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

# The environment `serve run` starts Ray and Serve with: less periodic work at rest (docs/BENCHMARKS.md, "At rest and
# start-up"). Ray/Serve read these at start; on KubeRay set them in the pod spec instead.
#   RAY_SERVE_CONTROL_LOOP_INTERVAL_S      Serve controller loop, 0.1 s by default
#   RAY_SERVE_METRICS_EXPORT_INTERVAL_MS   each replica's and handle's cached-metrics flush, 100 ms by default
#   RAY_raylet_report_resources_period_milliseconds  raylet -> GCS resource reports, 100 ms by default (one node)
SERVE_ENV := RAY_SERVE_CONTROL_LOOP_INTERVAL_S=0.5 RAY_SERVE_METRICS_EXPORT_INTERVAL_MS=1000 RAY_raylet_report_resources_period_milliseconds=1000 RAY_USAGE_STATS_ENABLED=0

serve: model
	env $(SERVE_ENV) $(VENV)/bin/serve run serve_config.yaml

test: model harnesses
	$(PY) -m pytest tests -q -p no:cacheprovider

test-unit: install
	$(PY) -m pytest tests/unit -q

test-integration: model
	$(PY) -m pytest tests/integration -q

test-e2e: model harnesses
	$(PY) -m pytest tests/e2e -q

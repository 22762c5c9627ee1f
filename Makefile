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

# `make serve`: `serve run $(SERVE_CONFIG)` in a Ray instance started with agentserve.serve.ray_env's variables (the
# ones tests, benchmarks and KubeRay pods share) and less periodic work at rest (figures in docs/BENCHMARKS.md, "At
# rest and start-up"). Ray and Serve read these at start; on KubeRay set them in the pod spec instead.
#   RAY_SERVE_CONTROL_LOOP_INTERVAL_S      Serve controller loop, 0.1 s by default
#   RAY_SERVE_METRICS_EXPORT_INTERVAL_MS   each replica's and handle's cached-metrics flush, 100 ms by default
#   RAY_raylet_report_resources_period_milliseconds  raylet -> GCS resource reports, 100 ms by default (one node)
#   RAY_task_events_report_interval_ms     every worker's task-event push to the GCS, 1 s by default
#   RAY_worker_niceness=0                  Ray starts workers (every replica, the vLLM engine core and worker) at
#                                          nice 15; `vllm serve` runs at 0. On a shared machine nice 15 loses the CPU.
# SERVE_DASHBOARD=True brings back Ray's dashboard (its head and module processes, ~0.02 cores at rest; `serve run`
# itself has no switch for it, hence the ray.init before it).
SERVE_CONFIG    ?= serve_config.yaml
SERVE_DASHBOARD ?= False
SERVE_ENV = $(shell $(PY) -m agentserve.serve.ray_env) RAY_worker_niceness=0 RAY_SERVE_CONTROL_LOOP_INTERVAL_S=0.5 RAY_SERVE_METRICS_EXPORT_INTERVAL_MS=1000 RAY_raylet_report_resources_period_milliseconds=1000 RAY_task_events_report_interval_ms=5000

serve: model
	env $(SERVE_ENV) $(PY) -c 'import ray; ray.init(namespace="serve", include_dashboard=$(SERVE_DASHBOARD)); from ray.serve.scripts import cli; cli(["run", "$(SERVE_CONFIG)"])'

test: model harnesses
	$(PY) -m pytest tests -q -p no:cacheprovider

test-unit: install
	$(PY) -m pytest tests/unit -q

test-integration: model
	$(PY) -m pytest tests/integration -q

test-e2e: model harnesses
	$(PY) -m pytest tests/e2e -q

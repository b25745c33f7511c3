# The README's commands. Everything installs itself: Debian packages, a Python virtual environment
# and the control-plane binaries, the last two cached outside the checkout and keyed by version.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Where the virtual environment is; the venv target makes it (deps: beside the Go builds).
VENV := $(shell tools/ensure-venv.sh --path)
BIN := $(VENV)/bin
COLLECTIONS := $(CURDIR)/.build/collections
SANITY_ROOT := $(CURDIR)/.build/sanity/ansible_collections/accelerators/gpu
export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export PYTHONPATH := $(COLLECTIONS):$(CURDIR)/tools
# Bytecode cached outside the checkout, also where the environment says not to write it (PYTHONDONTWRITEBYTECODE):
# otherwise every pytest process (xdist's workers each collect) rewrites and compiles every test module anew.
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(dir $(VENV))pycache

.PHONY: help venv eda deps system-packages control-plane crds gpu-operator registry collection test lint sanity build pytest durations golden matrix demo down clean bundle bench bench-modules bench-deploy bench-upgrade bench-fleet docs docs-lint docs-src forget-bytecode

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# On a fresh machine the Python environment and the Debian packages are made while Go builds the control plane (and
# downloads its modules): pip and apt wait on the network, and the compiler takes up the slack.
deps: ## install system packages and the Python environment, build (or reuse) the control-plane binaries, fetch (or reuse) the upstream CRDs and the GPU Operator's manifests, side by side
	@$(MAKE) --no-print-directory -j 5 venv eda system-packages control-plane crds gpu-operator

venv:
	@tools/ensure-venv.sh >/dev/null

# ansible-rulebook and its Java runtime (tests/cluster/test_eda_rulebook.py runs the collection's rulebook).
eda: venv ## make (or reuse) ansible-rulebook's environment, with a Java runtime from PyPI (tools/ensure-eda.sh)
	@tools/ensure-eda.sh >/dev/null

system-packages:
	@bash tools/install-system-deps.sh

control-plane:
	@bash tools/localcluster/build-binaries.sh >/dev/null

crds:
	@bash tools/localcluster/fetch-crds.sh >/dev/null

gpu-operator:
	@bash tools/fetch-gpu-operator.sh >/dev/null

# Only the registry tests need it (tests/registry, tests/cluster/test_precompiled_registry.py); their fixture builds it
# too, but a run of several workers would build it in each.
registry: ## build (or reuse) the test registry's binaries (distribution and crane from the Go module proxy)
	@bash tools/localregistry/build-binaries.sh >/dev/null

collection: ## make the checkout importable as accelerators.gpu
	@mkdir -p $(COLLECTIONS)/ansible_collections/accelerators
	@ln -sfn $(CURDIR) $(COLLECTIONS)/ansible_collections/accelerators/gpu

# The gates before the tests two at a time (each is one process, mostly): the machine has two cores. Each gate's output
# comes whole, when it ends.
test: deps registry collection ## every gate CI runs: build, docs and changelog lint, ansible-lint, ansible-test sanity, pytest with the matrix
	@$(MAKE) --no-print-directory -j 2 --output-sync=target build docs-lint lint sanity
	@python -m matrix list
	$(PYTEST) tests

build: venv collection ## ansible-galaxy collection build
	@mkdir -p .build/dist
	ansible-galaxy collection build --force --output-path .build/dist .

lint: venv collection ## ansible-lint, production profile
	ansible-lint --profile production

sanity: venv collection ## ansible-test sanity from an ansible_collections/accelerators/gpu copy of the tracked files
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	@git ls-files -co --exclude-standard -z | xargs -0 cp --no-dereference --parents -t $(SANITY_ROOT)
	@# ansible-test lists files with git; the copy needs an index of its own (.build is ignored here).
	@cd $(SANITY_ROOT) && git init -q && git add -A
	@# The import test finds dependencies beside the collection, as an installed tree would have them.
	@mkdir -p $(SANITY_ROOT)/../../kubernetes && ln -sfn $(VENV)/lib/python3.11/site-packages/ansible_collections/kubernetes/core $(SANITY_ROOT)/../../kubernetes/core
	@bash tools/offline-pip-bootstrap.sh
	cd $(SANITY_ROOT) && ansible-test sanity --venv --python 3.11 --color no

# The docs tooling (antsibull-docs, Sphinx, antsibull-changelog) has a virtual environment of its own, made on first use.
DOCS_VENV = $(eval DOCS_VENV := $$(shell tools/ensure-venv.sh tools/docs-requirements.txt))$(DOCS_VENV)
DOCS_SRC := $(CURDIR)/.build/docs-src
DOCS_DIR := $(CURDIR)/.build/docs
# kubernetes.core (its doc fragment k8s_auth_options) from the main virtual environment; no PYTHONPATH, whose
# .build/collections would give Ansible the checkout itself as accelerators.gpu.
DOCS_ENV = PATH=$(DOCS_VENV)/bin:$$PATH PYTHONPATH= ANSIBLE_COLLECTIONS_PATH=$(DOCS_SRC):$(VENV)/lib/python3.11/site-packages

docs-src:
	@# antsibull-docs reads plugins/action/<module>.py, symlinks to plugins/plugin_utils/worker_action.py, as
	@# redirects of the modules to that file: it documents a copy of the files with the symlinks followed.
	@rm -rf $(DOCS_SRC) && mkdir -p $(DOCS_SRC)/ansible_collections/accelerators/gpu
	@git ls-files -co --exclude-standard -z | xargs -0 cp --dereference --parents -t $(DOCS_SRC)/ansible_collections/accelerators/gpu
	@# antsibull-docs lists a collection in a git checkout with git: the copy gets an index of its own (.build is ignored here).
	@cd $(DOCS_SRC)/ansible_collections/accelerators/gpu && git init -q && git add -A

docs: venv docs-src ## HTML docs with antsibull-docs: modules, filters, roles' argument specs, docs/docsite (.build/docs/build/html)
	@rm -rf $(DOCS_DIR) && mkdir -p $(DOCS_DIR)
	cd $(DOCS_DIR) && $(DOCS_ENV) antsibull-docs sphinx-init --use-current --dest-dir . --fail-on-error \
	  --project accelerators.gpu --copyright "accelerators.gpu developers" --title "accelerators.gpu" \
	  --index-rst-source $(CURDIR)/docs/docsite/site-index.rst accelerators.gpu >/dev/null
	$(DOCS_ENV) python tools/docs-intersphinx.py $(DOCS_DIR)
	$(DOCS_ENV) bash $(DOCS_DIR)/build.sh
	@echo "The site: $(DOCS_DIR)/build/html/index.html"

docs-lint: venv docs-src ## antsibull-docs' collection docs lint (plugins, roles, docs/docsite) and antsibull-changelog's lint
	@# rstcheck, which checks the code blocks, leaves a temporary file for each: they go in the copy, not in /tmp.
	@mkdir -p $(DOCS_SRC)/tmp
	cd $(DOCS_SRC)/ansible_collections/accelerators/gpu && TMPDIR=$(DOCS_SRC)/tmp $(DOCS_ENV) antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs .
	$(DOCS_ENV) antsibull-changelog lint
	$(DOCS_ENV) antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml
	@# CHANGELOG.md is antsibull-changelog's rendering of changelogs/changelog.yaml: rendered again in the copy, the same.
	cd $(DOCS_SRC)/ansible_collections/accelerators/gpu && $(DOCS_ENV) antsibull-changelog generate \
	  && diff -u $(CURDIR)/CHANGELOG.md CHANGELOG.md

# Four workers, each with a local cluster of its own; a file's tests stay on one worker (they may share a module-scoped
# fleet). The tests mostly wait on simulated nodes and polls: one worker keeps a core busy a third of the time, four
# keep both busy. PYTEST_WORKERS=0: one process. The files go out longest first, by tests/durations.json
# (tests/conftest.py; xdist's own order, most tests first, would start the longest files last); `make durations`
# rewrites it from the last run's .build/junit.xml. `make test` runs the matrix in the same session, beside the others.
PYTEST_WORKERS ?= 4
PYTEST = python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --junitxml=$(CURDIR)/.build/junit.xml
pytest: deps registry collection ## unit tests and integration tests against a local control plane (the matrix apart), on PYTEST_WORKERS workers
	$(PYTEST) tests --ignore=tests/matrix

# The objects of each reference fleet's deploy (tests/unit/golden/render.py), then the tables of their differences from
# the GPU Operator's manifests on the compatibility page (tests/unit/golden/upstream.py), which the unit tests compare.
golden: venv collection ## rewrite tests/golden (every object a deploy of each reference fleet writes) and the GPU Operator comparison's tables
	@bash tools/fetch-gpu-operator.sh >/dev/null
	python tests/unit/golden/render.py
	python tests/unit/golden/upstream.py

durations: venv ## tests/durations.json from the last pytest run's .build/junit.xml: each test file's seconds, which order the files
	python tools/test_durations.py .build/junit.xml tests/durations.json

matrix: deps collection ## unit tests and a demo-fleet smoke per ansible-core/Python/kubernetes client combination; MATRIX=ci (oldest, newest), all, or names (python -m matrix list)
	@python -m matrix list
	python -m pytest tests/matrix -s

demo: deps collection ## start the simulated OpenShift cluster with a mixed fleet, deploy the GPU stack, print its status
	@python -m localcluster down >/dev/null 2>&1 || true
	python -m localcluster up --flavour openshift --fleet tools/localcluster/fleets/demo.yml
	@python -m localcluster nodes
	KUBECONFIG=$(CURDIR)/.cluster/kubeconfig ansible-playbook -i localhost, accelerators.gpu.deploy
	KUBECONFIG=$(CURDIR)/.cluster/kubeconfig ansible-playbook -i localhost, accelerators.gpu.status
	@echo; echo "The cluster keeps running: export KUBECONFIG=$(CURDIR)/.cluster/kubeconfig; stop it with: make down"

bench: bench-modules bench-deploy bench-upgrade bench-fleet ## the benchmarks below

bench-modules: deps collection ## module speed, memory and bytes read on BENCH_NODES (5000) simulated nodes, beside the kubernetes.core peer; BENCH_SCALE=1000,5000,10000: modules only, per size
	python bench/bench_driver_planning.py

bench-deploy: deps collection ## deploy playbook on 100 GPU nodes, first and no-op runs, beside a kubernetes.core-only peer
	python bench/bench_deploy.py

bench-upgrade: deps collection ## driver rollout on 12 GPU nodes (20 s builds): per-node overhead, beside a kubernetes.core-only peer
	python bench/bench_driver_upgrade.py

bench-fleet: deps collection ## no-op reconcile over 1 and 3 clusters in one inventory (3 local control planes), beside a run per cluster
	python bench/bench_fleet.py

bundle: venv collection ## offline install bundle: the collection, kubernetes.core and the runtime wheels (.build/bundle/)
	bash tools/bundle/make-bundle.sh

down: venv ## stop the demo cluster and everything it started
	python -m localcluster down

clean: down ## stop the demo cluster and remove build output
	rm -rf .build .cluster

forget-bytecode: ## remove this checkout's bytecode from the shared cache (.ci/run does, after a run: CI's clone is thrown away)
	rm -rf $(PYTHONPYCACHEPREFIX)$(CURDIR)

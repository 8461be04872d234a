.DEFAULT_GOAL := help
PY := .venv/bin/python

.PHONY: help setup demo test test-rust test-python test-aarch64 lint bench bench-gateway bench-report wheel clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

setup: ## virtualenv, pinned dependencies, release build of the extension, verified model
	@bash scripts/setup.sh

demo: setup ## route a few queries over the built-in demo catalog
	$(PY) -m toolgate demo

test: setup lint test-rust test-python ## the whole suite: lint, cargo test for the core, then pytest

test-rust: ## cargo test for the pure Rust core (no libpython)
	cargo test --quiet

test-python: ## pytest against the installed extension
	$(PY) -m pytest -q

test-aarch64: ## the Rust core's tests built for aarch64 and run under qemu (NEON kernels; root, Debian)
	bash scripts/test-aarch64.sh

lint: setup ## rustfmt, clippy, ruff, mypy and stubtest
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings
	cargo clippy --all-targets --features testing-hooks -- -D warnings
	$(PY) -m ruff check python tests benches examples
	$(PY) -m ruff format --check python tests benches examples
	$(PY) -m mypy
	$(PY) -m mypy.stubtest toolgate._toolgate

bench: setup ## pytest-benchmark suites, ratios against the peers printed at the end
	$(PY) -m pytest benches -q -p no:cacheprovider -o python_files='bench_*.py'

bench-gateway: setup ## the HTTP gateway under load: overhead, 16 clients, memory per worker
	$(PY) -m benches.gateway_load

bench-report: setup ## measure, then write docs/results.md and the README results section
	$(PY) -m benches.report

wheel: setup ## the release wheel for manylinux2014 in dist/ (zig links it), checked by auditwheel
	bash scripts/wheel.sh

clean: ## remove build products (keeps .venv and the model cache)
	cargo clean
	rm -f python/toolgate/_toolgate*.so

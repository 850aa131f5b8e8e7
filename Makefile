# The single test command is `make test` (what CI runs through .ci/run).
SHELL := /usr/bin/env bash
CARGO ?= cargo
HELM_BIN ?= $(CURDIR)/bin/helm
HELM3_BIN ?= $(CURDIR)/bin/helm3
export HELM_BIN HELM3_BIN

.PHONY: test tools lint unit generate crd build playground bench bench-hooks chaos release-manifests fuzz image clean

## test: install tools, check formatting and lints, run every test in the workspace
test: tools lint unit

## tools: install the pinned helm binaries into ./bin (helm 4 as helm, helm 3 as helm3) and the OCI registry the tests push charts to (docker-registry, from Debian's package when missing)
tools:
	hack/install-helm.sh
	hack/install-registry.sh

## lint: rustfmt and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## unit: all tests (unit, sandbox, integration); nextest when available
unit:
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --locked --no-fail-fast; \
	else \
		$(CARGO) test --workspace --locked --no-fail-fast; \
	fi
	$(CARGO) test --workspace --locked --doc

## generate: regenerate checked-in manifests from the code
generate:
	$(CARGO) run --quiet --locked -- crd > config/crd/bases/addons.cluster.x-k8s.io_fleetaddonconfigs.yaml
	cp config/crd/bases/addons.cluster.x-k8s.io_fleetaddonconfigs.yaml charts/cluster-api-addon-provider-fleet/files/fleetaddonconfigs.yaml

## release-manifests: clusterctl release assets into _out/ (TAG=vX.Y.Z sets the image tag), checked
release-manifests:
	hack/release-manifests.sh $(if $(TAG),--tag $(TAG))

## playground: run the provider against the sandbox API server with example CAPI objects
playground:
	hack/playground.sh

## bench: import benchmark as separate processes (BENCH_CLUSTERS, BENCH_NAMESPACES, BENCH_MODES, `waves` a mode with rollout waves); figures in docs/performance.md
bench:
	$(CARGO) build --release --locked --workspace --bins
	$(CARGO) test --release --locked --test integration bench_import:: -- --ignored --nocapture

## chaos: the chaos test at full size (CHAOS_CLUSTERS, CHAOS_NAMESPACES, CHAOS_KILLS, CHAOS_ERROR_RATE,
## CHAOS_THROTTLE_RATE, CHAOS_CONFLICT_RATE, CHAOS_WATCH_CLOSE_SECONDS, CHAOS_QUIET_SECONDS, CHAOS_SEED; see
## docs/development.md) and the 60 s API outage with two replicas
chaos:
	CHAOS_CLUSTERS=$${CHAOS_CLUSTERS:-300} CHAOS_NAMESPACES=$${CHAOS_NAMESPACES:-10} CHAOS_KILLS=$${CHAOS_KILLS:-20} \
	CHAOS_WATCH_CLOSE_SECONDS=$${CHAOS_WATCH_CLOSE_SECONDS:-5} CHAOS_QUIET_SECONDS=$${CHAOS_QUIET_SECONDS:-60} \
		$(CARGO) test --locked --test integration chaos:: -- --nocapture
	$(CARGO) test --locked --test integration outage:: -- --include-ignored --nocapture

## fuzz: fuzz every Runtime SDK request decoder for FUZZ_SECONDS (default 300), seed FUZZ_SEED, FUZZ_PROFILE (dev or release); findings in fuzz/findings/
fuzz:
	$(CARGO) run --locked -p caapf-fuzz --profile $(or $(FUZZ_PROFILE),dev) -- $(or $(FUZZ_SECONDS),300) $(FUZZ_SEED)

## image: build the image without a daemon (buildah from scratch: static caapf, pinned helm) and check it; needs root, buildah, umoci; not part of test
image: tools
	hack/build-image.sh

## bench-hooks: hook latency at a fixed rate over TLS, as separate processes (BENCH_CLUSTERS, BENCH_NAMESPACES, BENCH_HOOK_RATE, BENCH_HOOK_SECONDS); figures in docs/performance.md
bench-hooks:
	$(CARGO) build --release --locked --workspace --bins
	$(CARGO) test --release --locked --test integration bench_hooks:: -- --ignored --nocapture

## build: debug build of every binary
build:
	$(CARGO) build --workspace --locked

clean:
	rm -rf target bin _out

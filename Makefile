# The two commands of the README:
#   make serve   — build and run the service with its embedded defaults (127.0.0.1:8080, native sandbox)
#   make test    — run every test (what .ci/run runs)
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
RELEASE_ARCHES := amd64 arm64

.PHONY: build serve test deps release bench vet fmt

# The test recipe pipes go test into its summary: a failure on either side fails the recipe.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# SKIPS_ALLOWED=FILE makes every skip whose reason FILE does not allow a failure (.ci/run: .ci/skips-allowed).
SKIPS_ALLOWED ?=

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/codellm ./cmd/codellm

serve: build
	./bin/codellm serve

# Static binaries for Linux on x86-64 and arm64, stamped with VERSION, and their SHA-256 sums:
# dist/codellm-VERSION-linux-ARCH and dist/SHA256SUMS. Each binary's own platform is checked (a host that
# cannot run the other one, without qemu-aarch64, checks its ELF header).
release:
	rm -rf dist && mkdir -p dist
	for arch in $(RELEASE_ARCHES); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/codellm-$(VERSION)-linux-$$arch ./cmd/codellm || exit 1; \
	done
	cd dist && sha256sum codellm-$(VERSION)-linux-* > SHA256SUMS && sha256sum --check --quiet SHA256SUMS
	.ci/check-release dist $(VERSION) $(RELEASE_ARCHES)

# Fuzz seed corpora run as ordinary tests; the leak checks live in each package's TestMain. The summary
# (test/summary) prints each package's result and every failing test's output, then counts the skipped
# tests by reason.
test: deps
	$(GO) vet ./...
	GO=$(GO) .ci/lint  # staticcheck and deadcode at pinned versions, no allow-list
	$(GO) vet -tags codellm_trace ./internal/sandbox/... ./internal/runner/  # bench's trace row builds this
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -o /dev/null ./cmd/codellm  # links: vet does not see the nosplit stack limit
	$(GO) build -o bin/test-summary ./test/summary
	{ CGO_ENABLED=0 $(GO) test -json -count=1 -timeout 25m ./... ; \
	  CODELLM_TEST_GO_HELPER=1 CGO_ENABLED=0 $(GO) test -json -count=1 -timeout 10m ./internal/sandbox/ ; \
	} | bin/test-summary $(if $(SKIPS_ALLOWED),--allow $(SKIPS_ALLOWED))
# static like the release binary: its helper confines all of an init's threads (no AllThreadsSyscall with
# cgo); the second run is the threat-model tests on the Go helper too (the raw one serves most blocks).

# The Debian packages and npm modules the tests need (.ci/packages): installed as root, else the one
# apt-get line is printed.
deps:
	.ci/deps

bench:
	CGO_ENABLED=0 $(GO) run ./bench --quick

# The linters of make test alone: staticcheck and deadcode for every build (.ci/lint says what counts).
.PHONY: lint
lint:
	GO=$(GO) .ci/lint

fmt:
	gofmt -w $$(git ls-files '*.go')

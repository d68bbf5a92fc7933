# The two commands of the README:
#   make serve   — build and run the service with its embedded defaults (127.0.0.1:8080, native sandbox)
#   make test    — run every test (what .ci/run runs)
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build serve test bench vet fmt

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/codellm ./cmd/codellm

serve: build
	./bin/codellm serve

# Fuzz seed corpora run as ordinary tests; the leak checks live in each package's TestMain.
test:
	$(GO) vet ./...
	GO=$(GO) .ci/lint  # staticcheck and deadcode at pinned versions, no allow-list
	$(GO) vet -tags codellm_trace ./internal/sandbox/... ./internal/runner/  # bench's trace row builds this
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 25m ./...  # static like the release binary: its helper confines all of an init's threads (no AllThreadsSyscall with cgo)
	CODELLM_TEST_GO_HELPER=1 CGO_ENABLED=0 $(GO) test -count=1 -timeout 10m ./internal/sandbox/  # the threat-model tests on the Go helper too (the raw one serves most blocks)

bench:
	CGO_ENABLED=0 $(GO) run ./bench --quick

# The linters of make test alone: staticcheck and deadcode for every build (.ci/lint says what counts).
.PHONY: lint
lint:
	GO=$(GO) .ci/lint

fmt:
	gofmt -w $$(git ls-files '*.go')

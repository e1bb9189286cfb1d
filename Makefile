# megadlm: the two commands a user needs are `make demo` and `make test`.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all build deps demo-deps test-deps demo test bench clean

all: build

deps:
	bash scripts/install-deps.sh

demo-deps:
	bash scripts/install-deps.sh --demo
	cd tests/node && npm ci --prefer-offline --no-audit --no-fund

test-deps:
	bash scripts/install-deps.sh --test
	cd tests/node && npm ci --prefer-offline --no-audit --no-fund

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# Tokenize the bundled King James Bible with GPT-2's BPE, train a small autoregressive model
# and a small masked-diffusion model (about a minute each), save checkpoints, sample from both.
demo: demo-deps build
	bash scripts/demo.sh $(BUILD)

test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j 1

bench: build
	bash scripts/install-deps.sh --bench
	bash bench/bench_gpt2.sh $(BUILD)

clean:
	rm -rf $(BUILD)

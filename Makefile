# megadlm: the two commands a user needs are `make demo` and `make test`.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all build deps demo-deps test-deps demo test sanitize fuzz-deps fuzz bench clean

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
# and a small masked-diffusion model (about a minute each on 2 idle cores), save checkpoints, sample
# from both.
demo: demo-deps build
	bash scripts/demo.sh $(BUILD)

test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j 1

# ASan + UBSan build in build-asan: unit tests, a set of single-process and 2-rank script tests,
# and every fuzz corpus input once (also through the libFuzzer build); fails on any sanitizer
# report (scripts/sanitize.sh).
sanitize: test-deps fuzz-deps
	bash scripts/sanitize.sh build-asan

fuzz-deps:
	bash scripts/install-deps.sh --fuzz

# libFuzzer (clang) on each reader of user files for FUZZ_SECONDS (scripts/fuzz.sh).
FUZZ_SECONDS ?= 60
fuzz: fuzz-deps
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

bench: build
	bash scripts/install-deps.sh --bench
	bash bench/bench_gpt2.sh $(BUILD)

clean:
	rm -rf $(BUILD)

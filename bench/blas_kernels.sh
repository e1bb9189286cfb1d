# Sourced by the benches: every GEMM of a bench (megadlm's, the reference sgemm's, PyTorch's) runs
# on one OpenBLAS kernel set, named in its output. OPENBLAS_CORETYPE when set; else the set
# megadlm runs on this CPU (`megadlm --version`: OpenBLAS's own choice, or the one megadlm
# restarts itself with where OpenBLAS 0.3.21 does not know the CPU and would run its SSE-only
# Prescott kernels).
# usage: bench_blas_kernels MEGADLM_BINARY
bench_blas_kernels() {
  if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    OPENBLAS_CORETYPE=$("$1" --version | sed -n 's/^BLAS: .*; kernels \([A-Za-z0-9]*\).*/\1/p')
    [ -n "$OPENBLAS_CORETYPE" ] || { echo "bench: '$1 --version' names no BLAS kernel set" >&2; exit 1; }
    export OPENBLAS_CORETYPE
  fi
}

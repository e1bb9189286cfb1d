#!/usr/bin/env bash
# Tensor/sequence parallelism equivalence for the gpt2 family (see tensor_parallel_equivalence.sh).
FAMILY=gpt2 exec bash "$(dirname "$0")/tensor_parallel_equivalence.sh"

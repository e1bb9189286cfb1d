#!/usr/bin/env bash
# Tensor/sequence parallelism equivalence for the llama family (see tensor_parallel_equivalence.sh).
FAMILY=llama exec bash "$(dirname "$0")/tensor_parallel_equivalence.sh"

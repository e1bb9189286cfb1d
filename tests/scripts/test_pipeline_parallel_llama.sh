#!/usr/bin/env bash
# Pipeline parallelism equivalence for the llama family (see pipeline_parallel_equivalence.sh).
FAMILY=llama exec bash "$(dirname "$0")/pipeline_parallel_equivalence.sh"

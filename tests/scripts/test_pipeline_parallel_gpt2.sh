#!/usr/bin/env bash
# Pipeline parallelism equivalence for the gpt2 family (see pipeline_parallel_equivalence.sh).
FAMILY=gpt2 exec bash "$(dirname "$0")/pipeline_parallel_equivalence.sh"

# shellcheck shell=bash disable=SC2034 # (the arrays are for the scripts that source this)
# The script tests' shared fixture, sourced by every tests/scripts/*.sh:
#     # shellcheck source=tests/scripts/lib.sh
#     . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It sets no shell options (each script keeps its own `set -e` or not): every helper returns
# a status and leaves failing or exiting to the caller.
#
# The environment: CTest gives MEGADLM (the binary), SRC (the source tree), BUILD (the build
# tree) and WORK (the test's scratch directory); run by hand, they default to the tree this
# file is in, its build/ and a fresh temporary directory. $MEGADLM is the one name of the
# binary (never $BUILD/megadlm: a build may name its binary elsewhere).
SRC=${SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD=${BUILD:-$SRC/build}
MEGADLM=${MEGADLM:-$BUILD/megadlm}
WORK=${WORK:-$(mktemp -d)}

# fresh_work: an empty $WORK, and the working directory in it
fresh_work() { rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || return; }

# The mpirun line: tests run as root in containers and with more ranks than cores.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

# ---- tiny models, as the tests train them (with --num-layers, batch sizes and the run's
# flags of their own)
# GPT-2-like: learned absolute positions, LayerNorm, GeLU, biases, tied embeddings; on mock
# data of a 100-token vocabulary
GPT_TINY=(--hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
          --mock-data --vocab-size 100)
# what turns the GPT-2-like model into a Llama-like one: RMSNorm, RoPE, SwiGLU, no biases,
# untied output layer
LLAMA_ARCH=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
            --untie-embeddings-and-output-weights)
# ... with grouped-query attention (2 groups) and QK layernorm, as most tests train it
LLAMA=("${LLAMA_ARCH[@]}" --group-query-attention --num-query-groups 2 --qk-layernorm)
DROPOUT=(--hidden-dropout 0.1 --attention-dropout 0.1)
# the context-parallel tests' tiny model (test_context_parallel*.sh): 2 layers, dropout on, a
# cosine schedule, logged every iteration and evaluated once (with --train-iters N and
# --eval-interval N of the test's own); CP_LLAMA turns it Llama-like with 8 heads in 4 groups
# (so CP 4 x TP splits them evenly)
CP_TINY=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --micro-batch-size 2
         --global-batch-size 4 --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 1
         --mock-data --vocab-size 100 --make-vocab-size-divisible-by 64 --log-interval 1
         --eval-iters 1 "${DROPOUT[@]}" --seed 5)
CP_LLAMA=("${LLAMA_ARCH[@]}" --ffn-hidden-size 64 --num-attention-heads 8 --group-query-attention
          --num-query-groups 4)

# ---- reading logs
# losses LOG: the lm loss of every logged iteration, one a line, and of every evaluation
# ("lm loss value"), in the order of the log
# losses -n LOG: "ITERATION/TRAIN_ITERS LOSS" for every logged iteration with a loss (the
# evaluations left out)
losses() {
  if [ "$1" = -n ]; then
    sed -nE 's/.*iteration +([0-9]+)\/ *([0-9]+) \|.*lm loss: ([^ ]*).*/\1\/\2 \3/p' "$2"
  else
    grep -o 'lm loss: [^ ]*\|lm loss value: [^ ]*' "$1" | awk '{print $NF}'
  fi
}

# rel_close WHAT RTOL COUNT A B: the numbers in files A and B (one a line) agree pairwise within
# the relative tolerance RTOL (|b - a| / |a|), A and B hold as many, and COUNT of them: "N"
# exactly N, "N+" at least N, "" any number (none too). Prints one line per disagreement and a
# summary; the status says whether they agree.
rel_close() {
  local what=$1 tol=$2 count=$3
  paste "$4" "$5" | awk -F'\t' -v what="$what" -v tol="$tol" -v count="$count" '
    { n++
      if ($1 == "" || $2 == "") { printf "  %s: value %d: %s vs %s (missing)\n", what, n, $2, $1; bad = 1; next }
      d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r
      if (r > tol) { printf "  %s: value %d: %s vs %s (rel %.3g)\n", what, n, $2, $1, r; bad = 1 } }
    END { want = count + 0
          if (count ~ /\+$/ ? n < want : (count != "" && n != want)) {
            printf "  %s: expected %s values, found %d\n", what, count, n; bad = 1 }
          printf "%s: %d values, worst rel %.3g\n", what, n, w; exit bad }'
}

# close_losses REF.log OTHER.log [RTOL [COUNT]]: OTHER's losses (see losses) are REF's within
# RTOL (default 1e-5), as many, COUNT of them (see rel_close; default: any number)
close_losses() {
  rel_close "$2" "${3:-1e-5}" "${4:-}" <(losses "$1") <(losses "$2")
}

# ---- expecting failures
# expect_error WANT COMMAND...: COMMAND exits non-zero and its output (stdout and stderr) holds
# the fixed string WANT. On failure prints why ("FAILED: ...") and returns 1. Leaves the output
# in ERR_OUT and the exit status in ERR_RC for further checks.
ERR_OUT='' ERR_RC=0
expect_error() {
  local want=$1; shift
  ERR_RC=0
  ERR_OUT=$("$@" 2>&1) || ERR_RC=$?
  if [ "$ERR_RC" = 0 ]; then
    echo "FAILED: accepted: $*"; return 1
  fi
  if ! grep -qF -- "$want" <<<"$ERR_OUT"; then
    echo "FAILED: $*: expected '$want', got: $(tail -3 <<<"$ERR_OUT")"; return 1
  fi
}

# ---- checkpoints
# iter_dir N: Megatron's name of iteration N's checkpoint directory
iter_dir() { printf 'iter_%07d' "$1"; }
# same_ckpt A B [ITERATION]: the parameters and the optimizer state of two checkpoints are
# byte-identical (model.safetensors and optimizer.safetensors; of A/iter_N and B/iter_N with
# ITERATION, of A and B themselves without)
same_ckpt() {
  local a=$1 b=$2 f
  if [ $# -ge 3 ]; then a=$1/$(iter_dir "$3") b=$2/$(iter_dir "$3"); fi
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$a/$f" "$b/$f" || return 1
  done
}

#!/usr/bin/env bash
# The layering check (scripts/check_layers.py): src/ has no upward edge (core < training <
# tools < main.c) and no cycle between modules, in its includes and in the symbols its objects
# use; and the check does fail, naming the edge, on small trees made to break each rule (an
# upward include, an include cycle, an upward call and a call cycle that no include shows, a
# flag name in a string of the core), and on a copy of src/ with one upward include, one cycle
# or one flag name in a core message added.
set -uo pipefail
# shellcheck source=tests/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
PY=${PYTHON:-python3}
CHECK=$SRC/scripts/check_layers.py
fail=0

# expect_fail NAME EXPECTED-LINE ARGS...: the check exits 1 and prints EXPECTED-LINE
expect_fail() {
  local name=$1 line=$2; shift 2
  "$PY" "$CHECK" "$@" > "$name.out" 2>&1
  local rc=$?
  [ "$rc" = 1 ] || { echo "FAILED: $name: exit status $rc, expected 1"; cat "$name.out"; fail=1; }
  grep -qxF -- "$line" "$name.out" \
      || { echo "FAILED: $name: no line '$line' in:"; cat "$name.out"; fail=1; }
}
expect_pass() {
  local name=$1; shift
  "$PY" "$CHECK" "$@" > "$name.out" 2>&1 || { echo "FAILED: $name: the check failed:"; cat "$name.out"; fail=1; }
}

# the real tree, includes and objects
expect_pass real --objects "$BUILD" "$SRC/src"
cat real.out

# a small layered tree: core/a, training/b (uses a), tools/c (uses b), main.c
mk_tree() {
  rm -rf "$1"; mkdir -p "$1/core" "$1/training" "$1/tools"
  printf 'int a_fn(void);\n' > "$1/core/a.h"
  printf '#include "core/a.h"\nint a_fn(void) { return 1; }\n' > "$1/core/a.c"
  printf 'int b_fn(void);\n' > "$1/training/b.h"
  printf '#include "training/b.h"\n#include "core/a.h"\nint b_fn(void) { return a_fn(); }\n' > "$1/training/b.c"
  printf '#include "training/b.h"\nint c_fn(void) { return b_fn(); }\n' > "$1/tools/c.c"
  printf 'int c_fn(void);\nint main(void) { return c_fn(); }\n' > "$1/main.c"
}
# compile TREE's .c files into OBJ/src/... as CMake lays its objects out
compile_tree() {
  local tree=$1 obj=$2 f
  rm -rf "$obj"
  for f in $(cd "$tree" && find . -name '*.c'); do
    mkdir -p "$obj/src/$(dirname "$f")"
    cc -c -I "$tree" "$tree/$f" -o "$obj/src/$f.o" || { echo "FAILED: cannot compile $f"; fail=1; }
  done
}

mk_tree ok; compile_tree ok ok_obj
expect_pass ok --objects ok_obj ok

mk_tree up
printf '#include "training/b.h"\n' >> up/core/a.c
expect_fail upward_include "check_layers: upward include: core/a.c (core) includes training/b.h (training)" up

mk_tree cyc
printf 'int x_fn(void);\n#include "core/y.h"\n' > cyc/core/x.h
printf 'int y_fn(void);\n' > cyc/core/y.h
printf '#include "core/x.h"\nint y_fn(void) { return 0; }\n' > cyc/core/y.c
expect_fail include_cycle "check_layers: cycle: core/x -> core/y -> core/x (core/x.h includes core/y.h; core/y.c includes core/x.h)" cyc

# an upward call: core declares a training function itself, no include shows it
mk_tree upcall
printf 'int b_fn(void);\nint a2(void) { return b_fn(); }\n' >> upcall/core/a.c
compile_tree upcall upcall_obj
expect_pass upcall_includes_only upcall
expect_fail upward_call "check_layers: upward call: core/a.c (core) uses b_fn of training/b.c (training)" --objects upcall_obj upcall

# a call cycle through a header of a third module (as convert.c and convert_difflm.c were)
mk_tree callcyc
printf 'int p_fn(int);\nint q_fn(int);\n' > callcyc/core/decls.h
printf '#include "core/decls.h"\nint p_fn(int n) { return n ? q_fn(n - 1) : 0; }\n' > callcyc/core/p.c
printf '#include "core/decls.h"\nint q_fn(int n) { return n ? p_fn(n - 1) : 1; }\n' > callcyc/core/q.c
compile_tree callcyc callcyc_obj
expect_pass callcyc_includes_only callcyc
expect_fail call_cycle "check_layers: cycle: core/p -> core/q -> core/p (core/p.c uses q_fn of core/q.c; core/q.c uses p_fn of core/p.c)" --objects callcyc_obj callcyc

# a flag name in a string literal of the core ("--" and a letter); not in a comment, not "---",
# not in training/
mk_tree flagstr
printf '/* --split: a comment may name a flag */\nstatic const char *ok = "--- ok -- 1";\n' >> flagstr/core/a.c
printf 'static const char *t = "--split: training names flags";\n' >> flagstr/training/b.c
expect_pass flag_in_comment_or_training flagstr
printf 'static const char *m = "a \\"quoted\\" --seq-length: %%d";\n' >> flagstr/core/a.c
expect_fail flag_in_core 'check_layers: flag name in the core: core/a.c:5: "a \"quoted\" --seq-length: %d" (the core describes the problem; the layer that reads the flag names it)' flagstr

# a copy of the real tree with one upward include, then with one cycle, then with a flag name in
# a core message
cp -r "$SRC/src" real_up
printf '#include "training/arguments.h"\n' >> real_up/core/tensor/tensor.c
expect_fail real_upward "check_layers: upward include: core/tensor/tensor.c (core) includes training/arguments.h (training)" real_up
cp -r "$SRC/src" real_cyc
printf '#include "core/models/gpt_model.h"\n' >> real_cyc/core/util/alloc.c
"$PY" "$CHECK" real_cyc > real_cyc.out 2>&1
[ $? = 1 ] && grep -q '^check_layers: cycle: .*core/util/alloc.c includes core/models/gpt_model.h' real_cyc.out \
    || { echo "FAILED: a cycle through core/util/alloc.c was not reported:"; cat real_cyc.out; fail=1; }
cp -r "$SRC/src" real_flag
printf 'const char *core_flag_message = "--tensor-model-parallel-size: too large";\n' >> real_flag/core/parallel_state.c
"$PY" "$CHECK" real_flag > real_flag.out 2>&1
[ $? = 1 ] && grep -q '^check_layers: flag name in the core: core/parallel_state.c:[0-9]*: "--tensor-model-parallel-size: too large"' real_flag.out \
    || { echo "FAILED: a flag name in core/parallel_state.c was not reported:"; cat real_flag.out; fail=1; }

# bad usage
"$PY" "$CHECK" "$WORK/no-such-dir" > usage.out 2>&1
[ $? = 2 ] || { echo "FAILED: a missing SRC_DIR did not exit 2"; fail=1; }

[ $fail = 0 ] && echo "the layering check passes on src/ and fails on each kind of break (a flag name in the core too)"
exit $fail

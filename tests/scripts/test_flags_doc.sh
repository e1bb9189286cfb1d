#!/usr/bin/env bash
# docs/FLAGS.md cannot drift from src/training/arguments.def: it must be exactly what
# scripts/flags_doc.sh generates (the prose of docs/FLAGS.md.in and the tables of
# `megadlm train --help-markdown`). Also: every flag `megadlm train --help` lists (a separate
# printer of the same table) has a row in docs/FLAGS.md, and the check does fail on an edited
# copy.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rm -rf "$WORK"; mkdir -p "$WORK/tree/scripts" "$WORK/tree/docs"; cd "$WORK"
fail=0
bash "$SRC/scripts/flags_doc.sh" --check "$BUILD" > diff.txt 2>&1 \
    || { echo "FAILED: docs/FLAGS.md is not what bash scripts/flags_doc.sh generates:"; head -40 diff.txt; fail=1; }
# every flag of --help (not the refused ones: those are listed by name) has a table row
"$MEGADLM" train --help | sed -n '/^refused/q;p' | grep -o '^  --[a-z0-9-]*' | sed 's/^  //' | sort -u > help_flags.txt
[ "$(wc -l < help_flags.txt)" -gt 100 ] || { echo "FAILED: --help lists only $(wc -l < help_flags.txt) flags"; fail=1; }
while read -r f; do
  grep -q "^| \`$f[ \`]" "$SRC/docs/FLAGS.md" || { echo "FAILED: $f has no row in docs/FLAGS.md"; fail=1; }
done < help_flags.txt
for f in --attention-mask-type --model-running-mode --mask-token --train-data-path --valid-data-path --test-data-path; do
  grep -q "^| \`$f " "$SRC/docs/FLAGS.md" || { echo "FAILED: $f not in the tables"; fail=1; }
  sed -n '/^## refused/,/^## validation/p' "$SRC/docs/FLAGS.md" | grep -q -- "\`$f\`" \
      && { echo "FAILED: $f listed as refused"; fail=1; }
done
# the check fails on a copy whose FLAGS.md was edited by hand, and passes on a fresh one
cp "$SRC/scripts/flags_doc.sh" tree/scripts/; cp "$SRC/docs/FLAGS.md.in" "$SRC/docs/FLAGS.md" tree/docs/
sed -i 's/^| `--seed N` | 1234 |/| `--seed N` | 4321 |/' tree/docs/FLAGS.md
cmp -s tree/docs/FLAGS.md "$SRC/docs/FLAGS.md" && { echo "FAILED: the test's edit did not apply"; fail=1; }
bash tree/scripts/flags_doc.sh --check "$BUILD" > /dev/null 2>&1 && { echo "FAILED: --check passed on an edited FLAGS.md"; fail=1; }
bash tree/scripts/flags_doc.sh "$BUILD" && bash tree/scripts/flags_doc.sh --check "$BUILD" > /dev/null \
    || { echo "FAILED: regenerating did not make the copy pass"; fail=1; }
[ $fail = 0 ] && echo "docs/FLAGS.md matches arguments.def"
exit $fail

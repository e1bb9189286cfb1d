#!/usr/bin/env bash
# Writes docs/FLAGS.md: the prose of docs/FLAGS.md.in with each {{flags:KEY}} line replaced by
# the table `megadlm train --help-markdown` prints for that group (src/training/arguments.def).
#   bash scripts/flags_doc.sh [BUILD_DIR]          regenerate docs/FLAGS.md
#   bash scripts/flags_doc.sh --check [BUILD_DIR]  exit 1 (with a diff) when it differs
set -euo pipefail
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
bin=$build/megadlm
[ -x "$bin" ] || { echo "flags_doc.sh: $bin not found (build first: make build)" >&2; exit 2; }
tables=$(mktemp)
out=$(mktemp)
trap 'rm -f "$tables" "$out"' EXIT
"$bin" train --help-markdown > "$tables"
# The template's {{flags:KEY}} lines take the rows after "@@flags:KEY@@"; a KEY without a
# table, or a table the template never places, is an error (a group would go undocumented).
awk -v tables="$tables" '
    BEGIN {
        while ((getline line < tables) > 0) {
            if (line ~ /^@@flags:[a-z]+@@$/) { key = substr(line, 9, length(line) - 10); keys[key] = 1; continue }
            body[key] = body[key] line "\n"
        }
    }
    /^\{\{flags:[a-z]+\}\}$/ {
        key = substr($0, 9, length($0) - 10)
        if (!(key in keys)) { print "flags_doc.sh: no table for " $0 > "/dev/stderr"; bad = 1; next }
        printf "%s", body[key]; used[key] = 1; next
    }
    { print }
    END {
        for (k in keys) if (!(k in used)) { print "flags_doc.sh: docs/FLAGS.md.in has no {{flags:" k "}}" > "/dev/stderr"; bad = 1 }
        exit bad
    }' "$root/docs/FLAGS.md.in" > "$out"
if [ "$check" = 1 ]; then
    if ! diff -u "$root/docs/FLAGS.md" "$out"; then
        echo "docs/FLAGS.md differs from what scripts/flags_doc.sh generates: run bash scripts/flags_doc.sh" >&2
        exit 1
    fi
    exit 0
fi
cp "$out" "$root/docs/FLAGS.md"

#!/usr/bin/env bash
# The map of docs/ARCHITECTURE.md ("The map: Megatron file to megadlm file") is a test: every
# megadlm file a row names exists under src/, and every name of its third column occurs in that
# file as a word (grep -w). The links of ARCHITECTURE.md and its deep-dive pages resolve (the
# page, and the heading an anchor names), and a reference 'docs/PAGE.md, "Title"' in README.md or
# docs/ names a heading of that page. The check is shown failing on copies of the tree with a
# file renamed, a name removed, a deep-dive page removed and a stale section reference.
set -uo pipefail
# shellcheck source=tests/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1

# GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'.
anchor() { printf '%s' "$1" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'; }

# check_tree ROOT: prints one line per problem, exits 1 if there is any.
check_tree() {
  local root=$1 doc=$1/docs/ARCHITECTURE.md bad=0 rows=0 files=0 names=0
  [ -f "$doc" ] || { echo "no $doc"; return 1; }
  # the map: the table after its heading, up to the first line that is not a table row
  local table
  table=$(awk '/^## The map: Megatron file to megadlm file/ {on=1; next}
               on && /^\|/ {print; seen=1; next}
               on && seen {exit}' "$doc" | tail -n +3)
  while IFS= read -r row; do
    [ -n "$row" ] || continue
    rows=$((rows + 1))
    local c1 c2 c3 file
    c1=$(printf '%s' "$row" | awk -F'|' '{print $2}')
    c2=$(printf '%s' "$row" | awk -F'|' '{print $3}')
    c3=$(printf '%s' "$row" | awk -F'|' '{print $4}')
    file=$(printf '%s' "$c2" | grep -o '`[^`]*`' | head -1 | tr -d '`')
    if printf '%s' "$c2" | grep -q '^ *none'; then
      continue  # no megadlm file: what stands in its place is prose
    fi
    if [ -z "$file" ]; then
      echo "map row without a megadlm file or 'none': $row"; bad=1; continue
    fi
    [ "$(printf '%s' "$c2" | grep -o '`[^`]*`' | wc -l)" = 1 ] \
        || { echo "map row names more than one file (one per row): $row"; bad=1; }
    if [ ! -f "$root/src/$file" ]; then
      echo "map: src/$file does not exist (row: ${c1# })"; bad=1; continue
    fi
    files=$((files + 1))
    local syms
    syms=$(printf '%s' "$c3" | grep -o '`[^`]*`' | tr -d '`')
    [ -n "$syms" ] || { echo "map: no names to look for in src/$file"; bad=1; }
    for s in $syms; do
      names=$((names + 1))
      grep -qw -- "$s" "$root/src/$file" || { echo "map: '$s' does not occur in src/$file"; bad=1; }
    done
  done <<< "$table"
  # a map that lost its rows must not pass for an empty one
  [ "$rows" -ge 60 ] || { echo "map: only $rows rows (expected the whole map, 60 or more)"; bad=1; }

  # links of ARCHITECTURE.md and its pages: the page exists and holds the anchor's heading
  local page
  for page in "$doc" "$root"/docs/architecture/*.md; do
    [ -f "$page" ] || continue
    local dir; dir=$(dirname "$page")
    while IFS= read -r link; do
      local target=${link%%#*} frag=""
      [[ $link == *"#"* ]] && frag=${link#*#}
      [ -n "$target" ] || target=$(basename "$page")
      if [ ! -f "$dir/$target" ]; then
        echo "${page#"$root"/}: link to missing $target"; bad=1; continue
      fi
      if [ -n "$frag" ]; then
        local found=0 h
        while IFS= read -r h; do
          [ "$(anchor "$h")" = "$frag" ] && { found=1; break; }
        done < <(sed -n 's/^#\{1,6\} //p' "$dir/$target")
        [ "$found" = 1 ] || { echo "${page#"$root"/}: no heading for #$frag in $target"; bad=1; }
      fi
    done < <(grep -o '](\([^)]*\.md\)\(#[^)]*\)\?)' "$page" | sed 's/^](//; s/)$//' | grep -v '://')
  done

  # 'docs/PAGE.md, "Title"' in README.md and docs/: PAGE has a heading starting with Title
  while IFS= read -r ref; do
    local pg title
    pg=$(printf '%s' "$ref" | sed 's/^\(docs\/[A-Za-z0-9_/.-]*\.md\).*/\1/')
    title=$(printf '%s' "$ref" | sed 's/.*"\([^"]*\)"$/\1/')
    if [ ! -f "$root/$pg" ]; then echo "reference to missing $pg"; bad=1; continue; fi
    # FLAGS.md's flag names are its sections too
    grep -q "^#\{1,6\} $title" "$root/$pg" || grep -qF -- "- \`$title" "$root/$pg" \
        || { echo "no section \"$title\" in $pg (referenced as: $ref)"; bad=1; }
  done < <(cat "$root/README.md" "$root"/docs/*.md "$root"/docs/architecture/*.md 2>/dev/null \
             | tr '\n' ' ' \
             | grep -o 'docs/[A-Za-z0-9_/.-]*\.md\(](docs/[A-Za-z0-9_/.-]*\.md)\)\?,\? *(\?"[^"]*"' \
             | sed 's/](docs\/[^)]*)//; s/,\? *(\?"/, "/' )
  echo "map: $rows rows, $files files, $names names"
  return $bad
}

fail=0
out=$(check_tree "$SRC"); rc=$?
echo "$out"
[ "$rc" = 0 ] || { echo "FAILED: the tree's map or references do not hold"; fail=1; }

# mutants: a copy of docs/, README.md and src/ with one thing broken; each must fail, naming it
copy() { rm -rf "$WORK/$1"; mkdir -p "$WORK/$1"; cp -r "$SRC/docs" "$SRC/src" "$SRC/README.md" "$WORK/$1/"; }
expect_fail() {  # NAME EXPECTED-SUBSTRING
  local out rc
  out=$(check_tree "$WORK/$1"); rc=$?
  [ "$rc" = 1 ] || { echo "FAILED: mutant $1 passed the check"; fail=1; }
  # (a here-string, not a pipe: grep -q leaves at the first match, and under pipefail the
  # writer's SIGPIPE would fail the check)
  grep -qF -- "$2" <<<"$out" \
      || { echo "FAILED: mutant $1: no '$2' in:"; printf '%s\n' "$out"; fail=1; }
}
copy renamed; mv "$WORK/renamed/src/core/optimizer/clip_grads.c" "$WORK/renamed/src/core/optimizer/grad_clip.c"
expect_fail renamed "map: src/core/optimizer/clip_grads.c does not exist"
copy removed; sed -i 's/\bfinalize_model_grads\b/finish_model_grads/g' "$WORK/removed/src/core/distributed/finalize_model_grads.c"
expect_fail removed "map: 'finalize_model_grads' does not occur in src/core/distributed/finalize_model_grads.c"
copy nopage; rm "$WORK/nopage/docs/architecture/determinism.md"
expect_fail nopage "docs/ARCHITECTURE.md: link to missing architecture/determinism.md"
copy stale; printf '\nSee docs/MEMORY.md, "No such section".\n' >> "$WORK/stale/README.md"
expect_fail stale 'no section "No such section" in docs/MEMORY.md'
copy emptied; awk '/^## The map/ {print; skip=1; next} skip && /^\|/ {next} {print}' \
    "$SRC/docs/ARCHITECTURE.md" > "$WORK/emptied/docs/ARCHITECTURE.md"
expect_fail emptied "map: only 0 rows"

[ "$fail" = 0 ] && echo "PASS: the map holds; renamed files, removed names, missing pages and stale references fail"
exit "$fail"

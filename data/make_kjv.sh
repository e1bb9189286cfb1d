#!/bin/sh
# Regenerates kjv.jsonl from Debian's bible-kjv package (public-domain King James Version).
# One JSON object per chapter: {"text": "Ge 1\n1 In the beginning ...\n2 ..."}
set -e
echo "Gen1:1-Rev22:21" | bible -f 2>/dev/null | awk '
  /^[1-9]?[A-Z][A-Za-z]*[0-9]+:[0-9]+ / {
    if ($1 == last) next; last = $1;
    ref = $1; sub(/^[^ ]+ /, "");
    book = ref; sub(/[0-9]+:[0-9]+$/, "", book);
    cv = ref; sub(/^[1-9]?[A-Za-z]+/, "", cv);
    split(cv, p, ":");
    key = book " " p[1];
    if (key != cur) {
      if (cur != "") printf "\"}\n";
      cur = key; printf "{\"text\": \"%s %s", book, p[1];
    }
    gsub(/\\/, "\\\\"); gsub(/"/, "\\\"");
    printf "\\n%s %s", p[2], $0;
  }
  END { if (cur != "") printf "\"}\n" }'

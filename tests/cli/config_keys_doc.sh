#!/bin/bash
# config_keys_doc.sh WXTRAIN DOC — docs/config.md is `wxtrain config-keys --markdown`, the table the
# run-file parser records as it reads; a key added, removed or given another default or range in
# core/config.cpp without regenerating the doc fails here with the command that fixes it.
set -u
wxtrain="$1"
doc="$2"
if ! generated="$("$wxtrain" config-keys --markdown)"; then echo "FAIL: wxtrain config-keys --markdown failed"; exit 1; fi
if ! diff -u "$doc" <(printf '%s\n' "$generated"); then
  echo "FAIL: $doc differs from the parser's keys (above: - the doc, + the code). Regenerate it:"
  echo "  $wxtrain config-keys --markdown > $doc"
  exit 1
fi
echo "PASS: $doc matches wxtrain config-keys --markdown"

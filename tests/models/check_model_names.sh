#!/usr/bin/env bash
# check_model_names.sh ROOT — a model is one place. The zoo's names are read from the registry's
# table (models/registry.cpp: one <name>_entry() per model); each must have its folder
# models/<name>/ with its network, options and formulas, must be handed to the run-file fuzzer
# (fuzz/model_schemas.cpp), and must not appear as a string in the product's code outside its own
# folder: no `"<name>"` literal and no `name = \"<name>\"` run-file text in core/, ops/, models/
# (other folders), data/, distributed/, interop/, trainer/, estimator/, autotune/ or cli/. Tests, benchmarks
# and run files use models by name, as users do, and are not checked.
set -euo pipefail
root=${1:?usage: check_model_names.sh ROOT}
cd "$root"
names=$(sed -n 's/^ModelEntry \([a-z0-9_]*\)_entry();.*/\1/p' models/registry.cpp)
[ -n "$names" ] || { echo "FAIL: no <name>_entry() declarations found in models/registry.cpp"; exit 1; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for name in $names; do
  grep -q "${name}_entry()," models/registry.cpp || fail "$name is declared but not in the registry's table"
  for file in "$name.h" "$name.cpp" "${name}_options.h" "${name}_options.cpp" "${name}_memory.cpp"; do
    [ -f "models/$name/$file" ] || fail "models/$name/$file is missing"
  done
  grep -q "${name}_schema()" fuzz/model_schemas.cpp || fail "fuzz/model_schemas.cpp does not hand ${name}_schema() to the parser"
  hits=$(grep -rnE --include='*.cpp' --include='*.h' "\"$name\"|name = \\\\\"$name\\\\\"" \
           core ops models data distributed interop trainer estimator autotune cli 2>/dev/null |
         grep -v "^models/$name/" || true)
  if [ -n "$hits" ]; then
    fail "the model name '$name' appears outside models/$name/:"
    echo "$hits" | sed 's/^/    /'
  fi
done
count=$(echo "$names" | wc -w)
if [ "$failures" -gt 0 ]; then
  echo "$failures problems: a model's name, rules and formulas belong in models/<name>/ and its registry line"
  exit 1
fi
echo "$count models, each named only in its own folder and the registry: $(echo $names)"

#!/usr/bin/env bash
# Fails when the committed generated code differs from what `make generate`
# produces from the API types now.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/update-codegen.sh
if ! git diff --exit-code --stat -- pkg/apis pkg/client internal/generated hack/api-rule-violations.list \
   || [ -n "$(git status --porcelain -- pkg/client internal/generated pkg/apis)" ]; then
  echo "generated code is stale: run 'make generate' and commit the result" >&2
  exit 1
fi
echo "generated code is up to date"

#!/usr/bin/env bash
# Regenerates every generated file from the API types: deepcopy, OpenAPI
# (with model names), and the typed clientset, listers and informers.
# Run through `make generate`; the output is committed and `make verify-generated` checks it.
set -euo pipefail
cd "$(dirname "$0")/.."

module=github.com/muster-io/muster
apis=pkg/apis/muster/v1alpha1
header=hack/boilerplate.go.txt

go tool deepcopy-gen --go-header-file "$header" --output-file zz_generated.deepcopy.go "./$apis"

rm -f internal/generated/openapi/zz_generated.openapi.go
go tool openapi-gen --go-header-file "$header" \
  --output-file zz_generated.openapi.go \
  --output-dir internal/generated/openapi --output-pkg "$module/internal/generated/openapi" \
  --output-model-name-file zz_generated.model_name.go \
  --report-filename hack/api-rule-violations.list \
  k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
  k8s.io/apimachinery/pkg/api/resource k8s.io/apimachinery/pkg/util/intstr k8s.io/api/core/v1 "$module/$apis"

rm -rf pkg/client
go tool client-gen --go-header-file "$header" \
  --output-dir pkg/client/clientset --output-pkg "$module/pkg/client/clientset" \
  --clientset-name versioned --input-base "$module/pkg/apis" --input muster/v1alpha1
go tool lister-gen --go-header-file "$header" \
  --output-dir pkg/client/listers --output-pkg "$module/pkg/client/listers" "$module/$apis"
go tool informer-gen --go-header-file "$header" \
  --output-dir pkg/client/informers --output-pkg "$module/pkg/client/informers" \
  --versioned-clientset-package "$module/pkg/client/clientset/versioned" \
  --listers-package "$module/pkg/client/listers" "$module/$apis"

#!/bin/sh
# Builds the OpenID provider the sign-in tests run: zitadel/oidc v3.52.0's
# OpenID Provider package with its example login pages, configured by a
# file (hack/oidc/provider/main.go), from the Go module proxy in its own
# module (never muster's go.mod: the server does not link it). The binary
# lands in a cache dir outside the checkout, so that a CI machine builds it
# once per version of main.go:
#   ${MUSTER_OIDC_DIR:-$HOME/.cache/muster/oidc}/provider-<hash of the module>
# internal/testenv/oidctest runs it. Prints the binary's path. Does nothing
# when it is already there.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/hack/oidc/provider"
dir=${MUSTER_OIDC_DIR:-${HOME:-/root}/.cache/muster/oidc}
# The cache key is the module's content: a change to main.go builds anew.
sum=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
mkdir -p "$dir"
bin="$dir/provider-$sum"
if [ ! -x "$bin" ]; then
	echo "oidc: building the OpenID provider (zitadel/oidc v3.52.0) from the Go module proxy" >&2
	(cd "$src" && go build -trimpath -o "$bin.tmp.$$" .)
	mv -f "$bin.tmp.$$" "$bin"
fi
ln -sf "$(basename "$bin")" "$dir/provider.tmp.$$" && mv -f "$dir/provider.tmp.$$" "$dir/provider"
echo "$bin"

#!/bin/sh
# Builds the peer: a real kube-apiserver v1.37.2 (and its kube-controller-manager
# and kube-scheduler, which the planner's e2e runs) and a standalone kine v0.17.5,
# from the Go module proxy, each in its own module under hack/peer/ (never
# muster's go.mod). Aggregated-mode tests run muster behind them, and
# `make bench-peer` measures against them. The binaries land in a cache dir
# outside the checkout, so that a CI machine builds them once:
#   ${MUSTER_PEER_DIR:-$HOME/.cache/muster/peer/v1.37.2}/{kube-apiserver,kube-controller-manager,kube-scheduler,kine}
# Prints the directory. Does nothing for a binary already there.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${MUSTER_PEER_DIR:-${HOME:-/root}/.cache/muster/peer/v1.37.2}
mkdir -p "$dir"

build() { # build NAME PACKAGE [LDFLAGS]: hack/peer/NAME's module builds PACKAGE into $dir/NAME
	[ -x "$dir/$1" ] && return 0
	echo "peer: building $1 from the Go module proxy (minutes on a cold cache)" >&2
	(cd "$root/hack/peer/$1" && go build -trimpath -ldflags "${3:-}" -o "$dir/$1.tmp.$$" "$2")
	mv -f "$dir/$1.tmp.$$" "$dir/$1"
}

# kube-apiserver says its version (--version, /version) as a release
# does, which the planner's plans check (spec.kubernetes.version); one
# built before it was stamped is built again.
version=v1.37.2
stamp="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
if [ -x "$dir/kube-apiserver" ] && [ "$("$dir/kube-apiserver" --version 2>/dev/null)" != "Kubernetes $version" ]; then
	rm -f "$dir/kube-apiserver"
fi
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$stamp"
# The planner's control plane: same module (hack/peer/kube-apiserver's
# go.mod lists them as tools), same version, same stamp.
for c in kube-controller-manager kube-scheduler; do
	[ -x "$dir/$c" ] && continue
	echo "peer: building $c from the Go module proxy (minutes on a cold cache)" >&2
	(cd "$root/hack/peer/kube-apiserver" && go build -trimpath -ldflags "$stamp" -o "$dir/$c.tmp.$$" "k8s.io/kubernetes/cmd/$c")
	mv -f "$dir/$c.tmp.$$" "$dir/$c"
done
build kine github.com/k3s-io/kine
# The previous release's kube-apiserver (v1.36.3), which the planner's
# rolling-upgrade e2e upgrades from; its own script and module.
"$root/hack/peer-previous.sh" >&2
echo "$dir"

#!/bin/sh
# Builds the previous release's kube-apiserver (v1.36.3) from the Go module
# proxy, in its own module (hack/peer/kube-apiserver-v1.36.3), stamped with
# its version as a release is, into a cache dir outside the checkout:
#   ${MUSTER_PEER_PREVIOUS_DIR:-$HOME/.cache/muster/peer/v1.36.3}/kube-apiserver
# The planner's rolling-upgrade e2e (TestPlannerUpgrade) starts a cluster on
# it and upgrades to the v1.37.2 that hack/peer.sh builds. Prints the
# directory. Does nothing when a binary saying this version is there.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
version=v1.36.3
dir=${MUSTER_PEER_PREVIOUS_DIR:-${HOME:-/root}/.cache/muster/peer/$version}
mkdir -p "$dir"
if [ -x "$dir/kube-apiserver" ] && [ "$("$dir/kube-apiserver" --version 2>/dev/null)" = "Kubernetes $version" ]; then
	echo "$dir"
	exit 0
fi
stamp="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean"
echo "peer: building kube-apiserver $version from the Go module proxy (minutes on a cold cache)" >&2
(cd "$root/hack/peer/kube-apiserver-$version" && go build -trimpath -ldflags "$stamp" -o "$dir/kube-apiserver.tmp.$$" k8s.io/kubernetes/cmd/kube-apiserver)
mv -f "$dir/kube-apiserver.tmp.$$" "$dir/kube-apiserver"
echo "$dir"

#!/bin/sh
# Builds the previous release's control plane (kube-apiserver,
# kube-controller-manager and kube-scheduler v1.36.3) from the Go module
# proxy, in its own module (hack/peer/kube-apiserver-v1.36.3), each stamped
# with its version as a release is, into a cache dir outside the checkout:
#   ${MUSTER_PEER_PREVIOUS_DIR:-$HOME/.cache/muster/peer/v1.36.3}/<component>
# The planner's rolling-upgrade e2e (TestPlannerUpgrade) starts a cluster on
# them and upgrades to the v1.37.2 that hack/peer.sh builds. Prints the
# directory. Does nothing for a binary already saying this version.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
version=v1.36.3
dir=${MUSTER_PEER_PREVIOUS_DIR:-${HOME:-/root}/.cache/muster/peer/$version}
mkdir -p "$dir"
stamp="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
	if [ -x "$dir/$c" ] && [ "$("$dir/$c" --version 2>/dev/null)" = "Kubernetes $version" ]; then
		continue
	fi
	echo "peer: building $c $version from the Go module proxy (minutes on a cold cache)" >&2
	(cd "$root/hack/peer/kube-apiserver-$version" && go build -trimpath -ldflags "$stamp" -o "$dir/$c.tmp.$$" "k8s.io/kubernetes/cmd/$c")
	mv -f "$dir/$c.tmp.$$" "$dir/$c"
done
echo "$dir"

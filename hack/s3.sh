#!/bin/sh
# Builds the S3 server the snapshot tests upload to: versitygw v1.8.0, an
# S3 gateway over a POSIX directory that checks every request's AWS
# signature, from the Go module proxy in its own module (hack/s3/versitygw,
# never muster's go.mod: the server does not link it). The binary lands in a
# cache dir outside the checkout, so that a CI machine builds it once:
#   ${MUSTER_S3_DIR:-$HOME/.cache/muster/s3/versitygw-v1.8.0}/versitygw
# internal/testenv/s3test runs it. Prints the binary's path. Does nothing
# when it is already there.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${MUSTER_S3_DIR:-${HOME:-/root}/.cache/muster/s3/versitygw-v1.8.0}
mkdir -p "$dir"
if [ ! -x "$dir/versitygw" ]; then
	echo "s3: building versitygw from the Go module proxy (minutes on a cold cache)" >&2
	(cd "$root/hack/s3/versitygw" && go build -trimpath -o "$dir/versitygw.tmp.$$" github.com/versity/versitygw/cmd/versitygw)
	mv -f "$dir/versitygw.tmp.$$" "$dir/versitygw"
fi
echo "$dir/versitygw"

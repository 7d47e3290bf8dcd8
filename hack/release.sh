#!/usr/bin/env bash
# Cross-builds the release binaries into $RELEASE_DIR (make release):
#   muster-agent-linux-{amd64,arm64,arm}  (arm is GOARM=7), CGO_ENABLED=0
#   muster-server-linux-{amd64,arm64}     with cgo: its SQLite driver
#                                          (github.com/mattn/go-sqlite3, also
#                                          kine's) is C; arm64 needs
#                                          aarch64-linux-gnu-gcc
#   SHA256SUMS                             sha256sum's format, one line each
# A server started from this directory publishes every muster-agent-linux-<arch>
# beside it at /assets/ (install.sh picks the host's).
# RELEASE_WHAT=agents builds the agents only (what CI builds: the arch e2e
# test runs them under qemu-user); LDFLAGS comes from the Makefile.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${RELEASE_DIR:-dist}
what=${RELEASE_WHAT:-all}
ldflags=${LDFLAGS:-}
go=${GO:-go}
mkdir -p "$out"
# A release is what this run built: nothing stale from an earlier one.
rm -f "$out"/muster-* "$out"/SHA256SUMS

timed() { # NAME CMD...: runs CMD and says how long it took
	local name=$1 start=$SECONDS
	shift
	"$@"
	echo "release: built $name in $((SECONDS - start))s"
}

agent() { # GOARCH [GOARM]
	local arch=$1 arm=${2:-}
	timed "muster-agent-linux-$arch" env CGO_ENABLED=0 GOOS=linux GOARCH="$arch" ${arm:+GOARM=$arm} \
		"$go" build -trimpath -ldflags "$ldflags -s -w" -o "$out/muster-agent-linux-$arch" ./cmd/agent
}

server() { # GOARCH
	local arch=$1 cc
	case "$arch" in
		amd64) cc=${CC_AMD64:-$( [ "$(uname -m)" = x86_64 ] && echo gcc || echo x86_64-linux-gnu-gcc)} ;;
		arm64) cc=${CC_ARM64:-$( [ "$(uname -m)" = aarch64 ] && echo gcc || echo aarch64-linux-gnu-gcc)} ;;
	esac
	command -v "$cc" >/dev/null 2>&1 || {
		echo "release: muster-server-linux-$arch needs the C compiler $cc (its SQLite driver is cgo): apt-get install gcc-aarch64-linux-gnu, or set CC_${arch^^}" >&2
		exit 1
	}
	timed "muster-server-linux-$arch" env CGO_ENABLED=1 CC="$cc" GOOS=linux GOARCH="$arch" \
		"$go" build -trimpath -ldflags "$ldflags" -o "$out/muster-server-linux-$arch" ./cmd/server
}

agent amd64
agent arm64
agent arm 7
if [ "$what" = all ]; then
	server amd64
	server arm64
fi
(cd "$out" && sha256sum muster-* >SHA256SUMS)
echo "release: $out/SHA256SUMS"
cat "$out/SHA256SUMS"

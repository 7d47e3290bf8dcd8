package install

import "strings"

// bootstrap is the program the install command runs with sh -c. A fresh host
// trusts nothing of the server yet, so it cannot fetch install.sh over TLS
// as it is: it reads /cacerts unverified, refuses unless its SHA-256 is the
// hash the join token carries (K10<hash>::…), and only then fetches
// install.sh over TLS verified against that CA. Every download goes to a
// file and every step is checked, so a failure stops the command with a
// message and a non-zero status: a pipe (curl … | sh) would run an empty
// script and succeed. The token and URL come from the environment, never
// from a command line (install.sh reads MUSTER_TOKEN and MUSTER_URL).
const bootstrap = `set -eu
fail() { echo "[muster-install] ERROR: $*" >&2; exit 1; }
d=$(mktemp -d); cleanup() { rm -rf "$d"; }; trap cleanup EXIT; h=${MUSTER_TOKEN#K10}
curl -fsSLk "$MUSTER_URL/cacerts" -o "$d/ca.crt" || fail "cannot read $MUSTER_URL/cacerts: check the address and that this host reaches it"
[ "$(sha256sum <"$d/ca.crt")" = "${h%%::*}  -" ] || fail "the CA of $MUSTER_URL is not the one the token pins: wrong server, wrong token, or someone in between; nothing was installed"
curl -fsSL --cacert "$d/ca.crt" "$MUSTER_URL/install.sh" -o "$d/install.sh" || fail "cannot download $MUSTER_URL/install.sh over the pinned CA"
sh "$d/install.sh" agent`

// Command is the command that installs muster-agent as a service on a fresh
// Linux host, as root, and joins it to the server at serverURL with the join
// token: what the README shows (with https://SERVER:9443 and K10…) and what
// `muster-server token create` prints for its server and token.
func Command(serverURL, token string) string {
	return "MUSTER_URL=" + shellWord(strings.TrimSuffix(serverURL, "/")) + " MUSTER_TOKEN=" + shellQuote(token) + " sh -c '" + bootstrap + "'"
}

// shellWord leaves a URL as it is when the shell reads it so (an assignment
// is neither split nor globbed), else quotes it.
func shellWord(s string) string {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_./:@%+=,-[]", c)) {
			return shellQuote(s)
		}
	}
	return s
}

// shellQuote single-quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

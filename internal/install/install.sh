#!/bin/sh
# Muster's install script, served by every muster-server at /install.sh.
#
#   MUSTER_URL=https://SERVER:9443 MUSTER_TOKEN='K10<ca-hash>::<id>.<secret>' sh install.sh agent
#   sh install.sh server [muster-server flags]
#
# On a fresh host, fetch it with the command `muster-server token create
# --install-command` prints (README.md): the server's CA is private, so
# `curl https://SERVER:9443/install.sh` cannot verify it until the CA is
# pinned, and `curl … | sh` would run an empty script when curl fails.
#
# The agent install trusts nothing it downloads until it is checked: it reads
# the server's /cacerts without TLS verification, refuses unless its SHA-256
# is the hash the join token pins, and then downloads the agent binary over
# TLS verified against that CA and refuses unless the binary's SHA-256 is the
# one the server publishes beside it. The join token goes into a 0600
# environment file read by the service, never into the unit or a command line.
#
# Environment (k3s's conventions):
#   MUSTER_URL                   server URL for the agent (or --server URL)
#   MUSTER_TOKEN                 join token (agent) or server token (server) (or --token)
#   MUSTER_TOKEN_FILE            file holding that token
#   INSTALL_MUSTER_EXEC          extra flags for the service's command line (no secrets)
#   INSTALL_MUSTER_SKIP_START    true: install, do not start
#   INSTALL_MUSTER_SKIP_ENABLE   true: install, do not enable or start
#   INSTALL_MUSTER_SKIP_DOWNLOAD true: use the binary already in the bin dir
#   INSTALL_MUSTER_BIN_DIR       where binaries go (default /usr/local/bin)
#   INSTALL_MUSTER_SYSTEMD_DIR   where the unit and its env file go (default /etc/systemd/system;
#                                with openrc or none, also the init script, pid file and log)
#   INSTALL_MUSTER_DATA_DIR      the service's data dir (default /var/lib/muster/<agent|server>)
#   HTTPS_PROXY, HTTP_PROXY,     a forward proxy (either case): used for this script's downloads
#   NO_PROXY                     (curl, wget) and written into the service's env file, so the
#                                service reaches its server (and, for a server, S3) through it
#   INSTALL_MUSTER_INIT          systemd, openrc or none (default: what this host runs). none is
#                                for hosts without an init system (containers): the service runs
#                                detached (setsid, pid file, log) from the control script
#                                /etc/muster/<name> start|stop|status; it does not come back
#                                after a reboot unless something runs that script
set -eu

info() { echo "[muster-install] $*"; }
fatal() { echo "[muster-install] ERROR: $*" >&2; exit 1; }

# --- arguments -------------------------------------------------------------
cmd=${1:-}
case "$cmd" in
	agent | server) shift ;;
	'' | -*) cmd=agent ;;
	*) fatal "unknown command '$cmd': use 'agent' or 'server'" ;;
esac

token=${MUSTER_TOKEN:-}
token_file=${MUSTER_TOKEN_FILE:-}
url=${MUSTER_URL:-}
extra=${INSTALL_MUSTER_EXEC:+ $INSTALL_MUSTER_EXEC} # appended to the exec line, so it starts with a space
while [ $# -gt 0 ]; do
	case "$1" in
		--token) [ $# -ge 2 ] || fatal "--token needs a value"; token=$2; shift 2 ;;
		--token=*) token=${1#--token=}; shift ;;
		--token-file) [ $# -ge 2 ] || fatal "--token-file needs a value"; token_file=$2; shift 2 ;;
		--token-file=*) token_file=${1#--token-file=}; shift ;;
		--server) [ $# -ge 2 ] || fatal "--server needs a value"; url=$2; shift 2 ;;
		--server=*) url=${1#--server=}; shift ;;
		*)
			case "$1" in *[!A-Za-z0-9_./:=,@+-]*) fatal "flag '$1' holds characters this script will not put in a unit file" ;; esac
			extra="$extra $1"; shift ;;
	esac
done
# --- proxy and server URL: checked before anything is downloaded or written --
# without_credentials URL: the proxy URL without user and password, for messages.
without_credentials() {
	case "$1" in
		*://*) printf '%s://%s' "${1%%://*}" "$(printf '%s' "${1#*://}" | sed 's/^[^/]*@//')" ;;
		*) printf '%s' "$1" | sed 's/^[^/]*@//' ;;
	esac
}
# check_proxy NAME VALUE: [http|https://][USER:PASSWORD@]HOST[:PORT][/], the
# form the agent and curl both take; an IPv6 host in brackets. Its characters
# must be safe in the env file, which systemd reads and openrc sources.
check_proxy() {
	shown=$(without_credentials "$2")
	hint="set it like http://proxy.example.com:3128 or http://USER:PASSWORD@proxy.example.com:3128; nothing was installed"
	case "$2" in *[!]A-Za-z0-9._:/@%+=,[-]*) fatal "$1 ($shown) holds characters other than letters, digits and ._:/@%+=,[]- (percent-encode them in a password); nothing was installed" ;; esac
	rest=${2#*://}
	if [ "$rest" != "$2" ]; then
		case "${2%%://*}" in http | https) ;; *) fatal "$1 ($shown): only http:// and https:// proxies are supported; $hint" ;; esac
	fi
	hostport=${rest%/}
	case "$hostport" in */*) fatal "$1 ($shown) has a path, which a proxy URL does not; $hint" ;; esac
	hostport=${hostport##*@}
	port=-
	case "$hostport" in
		\[*\]) ;;
		\[*\]:*) port=${hostport##*\]:} ;;
		*:*:*) fatal "$1 ($shown): an IPv6 proxy address goes in brackets, like http://[2001:db8::1]:3128; nothing was installed" ;;
		*:*) port=${hostport##*:} ;;
	esac
	case "$hostport" in '' | :* | \[\]*) fatal "$1 ($shown) names no proxy host; $hint" ;; esac
	if [ "$port" != - ]; then
		case "$port" in '' | *[!0-9]*) fatal "$1 ($shown): the port '$port' is not a number; $hint" ;; esac
		if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then fatal "$1 ($shown): the port $port is out of range; $hint"; fi
	fi
}
proxy_vars=
for v in HTTPS_PROXY https_proxy HTTP_PROXY http_proxy NO_PROXY no_proxy; do
	eval "val=\${$v:-}"
	[ -n "$val" ] || continue
	case "$v" in
		NO_PROXY | no_proxy) case "$val" in *[!]A-Za-z0-9._:/*,[-]*) fatal "$v holds characters other than letters, digits and ._:/*,[]-: list host names, addresses and CIDRs separated by commas; nothing was installed" ;; esac ;;
		*) check_proxy "$v" "$val" ;;
	esac
	proxy_vars="$proxy_vars $v"
done
# curl reads both cases, wget (busybox's too) only lowercase: give it those.
if [ -n "${HTTPS_PROXY:-}" ] && [ -z "${https_proxy:-}" ]; then https_proxy=$HTTPS_PROXY; export https_proxy; fi
if [ -n "${NO_PROXY:-}" ] && [ -z "${no_proxy:-}" ]; then no_proxy=$NO_PROXY; export no_proxy; fi
if [ -n "$url" ]; then
	hostpart=${url#*://}
	hostpart=${hostpart%%/*}
	case "$hostpart" in
		\[*) ;;
		*:*:*) fatal "the server URL $url: an IPv6 address goes in brackets, like https://[2001:db8::1]:9443; nothing was installed" ;;
	esac
fi

if [ -z "$token" ] && [ -n "$token_file" ]; then
	[ -r "$token_file" ] || fatal "cannot read the token file $token_file"
	token=$(tr -d ' \t\r\n' <"$token_file")
fi

bin_dir=${INSTALL_MUSTER_BIN_DIR:-/usr/local/bin}
systemd_dir=${INSTALL_MUSTER_SYSTEMD_DIR:-/etc/systemd/system}
data_dir=${INSTALL_MUSTER_DATA_DIR:-/var/lib/muster/$cmd}
case "$data_dir" in /?*) ;; *) fatal "the data dir '$data_dir' must be an absolute path other than /" ;; esac
name=muster-$cmd
binary=$bin_dir/$name
uninstall=$bin_dir/$name-uninstall.sh

# --- platform --------------------------------------------------------------
# The agent binary is named for Go's GOOS and GOARCH; arm is the ARMv7 build
# (GOARM=7, hard float), which also runs on a 32-bit userland of a 64-bit
# ARM kernel (armv8l). The agent is static (no cgo): libc does not matter.
os=$(uname -s | tr '[:upper:]' '[:lower:]')
machine=$(uname -m)
case "$machine" in
	x86_64 | amd64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	armv7* | armv8l | armhf) arch=arm ;;
	armv5* | armv6*) fatal "this host is $machine: muster's 32-bit ARM agent is built for ARMv7 (GOARM=7) and does not run on $machine; nothing was installed" ;;
	*) fatal "this host is $machine, which muster-agent is not built for (it is for x86_64, aarch64 and armv7l); nothing was installed" ;;
esac
if [ "$cmd" = agent ] && [ "${INSTALL_MUSTER_SKIP_DOWNLOAD:-}" != true ]; then info "this host is $os/$machine: it runs muster-agent-$os-$arch"; fi

init=${INSTALL_MUSTER_INIT:-}
if [ -z "$init" ]; then
	if [ -d /run/systemd/system ] || command -v systemctl >/dev/null 2>&1; then
		init=systemd
	elif [ -x /sbin/openrc-run ]; then
		init=openrc
	else
		fatal "neither systemd nor openrc found: set INSTALL_MUSTER_INIT=systemd or openrc, or none to run $name detached without an init system (it will not restart after a reboot)"
	fi
fi
case "$init" in systemd | openrc | none) ;; *) fatal "INSTALL_MUSTER_INIT=$init: use systemd, openrc or none" ;; esac

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | cut -d' ' -f1
	else
		openssl dgst -sha256 "$1" | sed 's/^.*= //'
	fi
}

# download URL DEST [CAFILE]: without CAFILE the server is not verified, which
# only /cacerts may be, since its hash is checked against the token next.
# A server sending its most binaries at once answers 429 with Retry-After:
# curl waits as told and tries again (--retry counts 429 and 5xx as
# transient; without --retry-delay it honours Retry-After), for up to 5 min.
download() {
	if command -v curl >/dev/null 2>&1; then
		if [ -n "${3:-}" ]; then
			curl -fsSL --retry 10 --retry-max-time 300 --cacert "$3" -o "$2" "$1"
		else
			curl -fsSLk --retry 10 --retry-max-time 300 -o "$2" "$1"
		fi
	elif command -v wget >/dev/null 2>&1; then
		# wget (busybox's too) does not retry a 429: curl is the one to have.
		if [ -n "${3:-}" ]; then wget -qO "$2" --ca-certificate="$3" "$1"; else wget -qO "$2" --no-check-certificate "$1"; fi
	else
		fatal "neither curl nor wget found"
	fi
}

tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
umask 077

# --- trust: pin the CA, then verify the binary -----------------------------
fetch_binary() {
	[ -n "$url" ] || fatal "no server URL: give --server https://SERVER:9443 or MUSTER_URL"
	url=${url%/}
	case "$url" in https://*) ;; *) fatal "the server URL $url must start with https://" ;; esac
	case "$token" in
		K10*::*) pinned=${token#K10}; pinned=${pinned%%::*} ;;
		'') fatal "no token: give --token 'K10…', MUSTER_TOKEN or MUSTER_TOKEN_FILE" ;;
		*) fatal "the token is not a full join token (K10<ca-hash>::<id>.<secret>): the script needs the CA hash in it to trust the server" ;;
	esac
	case "$pinned" in *[!0-9a-f]*) fatal "the token's CA hash '$pinned' is not lowercase hex" ;; esac
	[ ${#pinned} -eq 64 ] || fatal "the token's CA hash has ${#pinned} characters, not 64"

	download "$url/cacerts" "$tmp/ca.crt" || fatal "cannot read $url/cacerts"
	got=$(sha256 "$tmp/ca.crt")
	[ "$got" = "$pinned" ] || fatal "the CA served by $url has hash $got but the token pins $pinned: refusing to trust this server (wrong server, or someone in between); nothing was downloaded or installed"
	info "the CA of $url matches the token's hash"

	asset=$name-$os-$arch
	if ! download "$url/assets/$asset.sha256" "$tmp/sha" "$tmp/ca.crt"; then
		# Which agents does the server have? It lists them, one os/arch a line.
		if download "$url/assets/muster-agent.platforms" "$tmp/platforms" "$tmp/ca.crt" 2>/dev/null; then
			have=$(tr '\n' ' ' <"$tmp/platforms")
			have=${have% }
			fatal "$url has no $asset for this $machine host; it has agents for: ${have:-none}. Its operator puts $asset (built by make release) in muster-server's --agent-assets-dir (default: beside muster-server); nothing was installed"
		fi
		fatal "cannot read $url/assets/$asset.sha256 (does the server serve $asset?); nothing was installed"
	fi
	want=$(cut -d' ' -f1 <"$tmp/sha")
	download "$url/assets/$asset" "$tmp/$name" "$tmp/ca.crt" || fatal "cannot download $url/assets/$asset"
	got=$(sha256 "$tmp/$name")
	[ "$got" = "$want" ] || fatal "the downloaded $asset has SHA-256 $got, not the $want the server publishes: refusing to install it"
	info "downloaded $asset, SHA-256 verified"
	mkdir -p "$bin_dir"
	chmod 0755 "$tmp/$name"
	mv -f "$tmp/$name" "$binary"
}

if [ "${INSTALL_MUSTER_SKIP_DOWNLOAD:-}" = true ]; then
	[ -x "$binary" ] || fatal "INSTALL_MUSTER_SKIP_DOWNLOAD=true but $binary is not there"
elif [ "$cmd" = agent ]; then
	fetch_binary
else
	[ -x "$binary" ] || fatal "put muster-server in $bin_dir first and set INSTALL_MUSTER_SKIP_DOWNLOAD=true"
fi

# --- service ---------------------------------------------------------------
if [ "$cmd" = agent ]; then
	[ -n "$url" ] || fatal "no server URL: give --server https://SERVER:9443 or MUSTER_URL"
	exec_line="$binary --server $url --data-dir $data_dir$extra"
else
	exec_line="$binary --data-dir $data_dir --with-agent$extra"
fi

pid_file=/run/$name.pid
log_file=/var/log/$name.log
if [ "$init" = systemd ]; then
	unit=$systemd_dir/$name.service
	env_file=$systemd_dir/$name.service.env
elif [ "$init" = openrc ]; then
	unit=/etc/init.d/$name
	env_file=/etc/conf.d/$name.env
else
	unit=/etc/muster/$name
	env_file=/etc/muster/$name.env
fi
if [ "$init" != systemd ] && [ -n "${INSTALL_MUSTER_SYSTEMD_DIR:-}" ]; then
	unit=$systemd_dir/$name
	env_file=$systemd_dir/$name.env
	pid_file=$systemd_dir/$name.pid
	log_file=$systemd_dir/$name.log
fi
mkdir -p "$(dirname "$unit")" "$(dirname "$env_file")"

# The token lives only here: 0600, read by the service manager.
rm -f "$env_file"
: >"$env_file"
chmod 0600 "$env_file"
if [ -n "$token" ]; then printf 'MUSTER_TOKEN=%s\n' "$token" >>"$env_file"; fi
# The proxy, as given to this script (checked above), for the service too.
for v in $proxy_vars; do
	eval "val=\${$v}"
	printf '%s=%s\n' "$v" "$val" >>"$env_file"
done
if [ -n "$proxy_vars" ]; then info "the service uses the proxy settings given to this script:$proxy_vars (in $env_file)"; fi
umask 022

if [ "$init" = systemd ]; then
	cat >"$unit" <<EOF
[Unit]
Description=Muster $cmd
Documentation=https://github.com/muster-io/muster
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=-$env_file
ExecStart=$exec_line
KillMode=mixed
Restart=always
RestartSec=5s
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
EOF
elif [ "$init" = openrc ]; then
	cat >"$unit" <<EOF
#!/sbin/openrc-run
description="Muster $cmd"
command="$binary"
command_args="${exec_line#"$binary" }"
command_background=true
pidfile="$pid_file"
output_log="$log_file"
error_log="$log_file"
depend() { need net; }
start_pre() { set -a; . "$env_file"; set +a; }
EOF
	chmod 0755 "$unit"
else
	# No init system: this script is the service manager. The process runs
	# in its own session (setsid) holding nothing of the caller's terminal or
	# SSH session, so it outlives the shell that started it; the pid file is
	# checked against the process's command line so that a recycled pid is
	# never signalled.
	cat >"$unit" <<EOF
#!/bin/sh
# Runs $name without an init system (installed with INSTALL_MUSTER_INIT=none).
# Usage: $unit start|stop|restart|status
set -u
pid_file='$pid_file'
running() {
	[ -r "\$pid_file" ] || return 1
	pid=\$(cat "\$pid_file") || return 1
	case "\$pid" in '' | *[!0-9]*) return 1 ;; esac
	kill -0 "\$pid" 2>/dev/null || return 1
	[ ! -r "/proc/\$pid/cmdline" ] || tr '\\000' ' ' <"/proc/\$pid/cmdline" | grep -qF -- '--data-dir $data_dir'
}
start() {
	if running; then echo "$name runs (pid \$pid)"; return 0; fi
	set -a; . '$env_file'; set +a
	umask 077
	if command -v setsid >/dev/null 2>&1; then
		nohup setsid $exec_line >>'$log_file' 2>&1 </dev/null &
	else
		nohup $exec_line >>'$log_file' 2>&1 </dev/null &
	fi
	echo \$! >"\$pid_file"
	echo "$name started (pid \$!, log $log_file)"
}
stop() {
	running || { rm -f "\$pid_file"; return 0; }
	kill "\$pid" 2>/dev/null
	i=0
	while running && [ \$i -lt 100 ]; do sleep 0.1 2>/dev/null || sleep 1; i=\$((i + 1)); done
	if running; then kill -9 "\$pid" 2>/dev/null; fi
	rm -f "\$pid_file"
	echo "$name stopped"
}
case "\${1:-}" in
	start) start ;;
	stop) stop ;;
	restart) stop; start ;;
	status) if running; then echo "$name runs (pid \$pid)"; else echo "$name is not running"; exit 3; fi ;;
	*) echo "usage: \$0 start|stop|restart|status" >&2; exit 2 ;;
esac
EOF
	chmod 0755 "$unit"
fi
info "installed $binary, $unit, $env_file (0600)"

# --- uninstall script: removes exactly what was installed ------------------
if [ "$init" = systemd ]; then
	stop="if [ -d /run/systemd/system ]; then systemctl disable --now $name.service 2>/dev/null || true; fi"
	reload="if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi"
else
	stop="if [ -x /sbin/openrc-run ]; then rc-service $name stop 2>/dev/null || true; rc-update delete $name default 2>/dev/null || true; fi"
	reload=":"
fi
if [ "$init" = none ]; then
	stop="if [ -x '$unit' ]; then '$unit' stop; fi"
	reload="rm -f '$pid_file' '$log_file'"
fi
if [ "$cmd" = server ]; then
	data_what="the datastore (SQLite), the CA and its key, the server token and the admin kubeconfig; take a snapshot first (muster-server datastore snapshot FILE) if you may want them back"
else
	data_what="this machine's identity (certificate, node password); to join again it needs a new join token"
fi
cat >"$uninstall" <<EOF
#!/bin/sh
# Removes what install.sh installed for $name.
# exec: $exec_line
set -u
[ "\$(id -u)" -eq 0 ] || [ -n "\${INSTALL_MUSTER_ALLOW_NONROOT:-}" ] || { echo "run as root" >&2; exit 1; }
$stop
echo "[muster-install] removing $name: $binary (and $binary.previous, kept by agent upgrades), $unit, $env_file"
rm -f "$unit" "$env_file" "$binary" "$binary.previous"
echo "[muster-install] removing its data dir $data_dir: $data_what"
rm -rf "$data_dir"
$reload
rm -f "$uninstall"
echo "[muster-install] removed $name"
EOF
chmod 0755 "$uninstall"

# --- start -----------------------------------------------------------------
if [ "${INSTALL_MUSTER_SKIP_ENABLE:-}" = true ]; then
	info "not enabling or starting $name (INSTALL_MUSTER_SKIP_ENABLE)"
	exit 0
fi
if [ "$init" = systemd ]; then
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload
		systemctl enable "$name.service"
		if [ "${INSTALL_MUSTER_SKIP_START:-}" != true ]; then systemctl restart "$name.service"; info "started $name"; fi
	else
		info "systemd is not running here: enable $name.service when it is"
	fi
elif [ "$init" = openrc ]; then
	rc-update add "$name" default >/dev/null
	if [ "${INSTALL_MUSTER_SKIP_START:-}" != true ]; then rc-service "$name" restart; info "started $name"; fi
elif [ "${INSTALL_MUSTER_SKIP_START:-}" != true ]; then
	"$unit" restart
	info "started $name without an init system: it does not restart after a reboot unless something runs '$unit start'"
fi

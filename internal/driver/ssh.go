package driver

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/internal/atomicfile"

	"golang.org/x/crypto/ssh"
	"k8s.io/klog/v2"
)

// SSH is the built-in "ssh" driver: each machine is an existing host the
// server reaches over SSH, where it installs the agent with install.sh. It
// makes no host and destroys none: remove uninstalls the agent.
//
// It authenticates with the server's own key (KeyDir/id_ed25519, made on
// first use), never with a credential from the pool: a pool's config is
// stored in plaintext. It trusts a host only by the host key the pool pins.
type SSH struct {
	// KeyDir holds the server's SSH key pair: <data-dir>/drivers/ssh.
	KeyDir string
	// Script is the install script run on the host: the server's own
	// install.sh, the bytes it serves at /install.sh. It is sent over the
	// SSH session rather than fetched by the host, because the host cannot
	// check the server's certificate before it has the CA the script pins.
	Script []byte

	mu     sync.Mutex
	signer ssh.Signer
	pub    string // authorized_keys line of signer
}

// Timeouts: connecting is bounded on its own so that an unreachable host
// fails in seconds; install downloads the agent binary (tens of MB).
const (
	sshConnectTimeout = 20 * time.Second
	sshInstallTimeout = 10 * time.Minute
	sshCommandTimeout = 2 * time.Minute
	// sshOutputTail is how much of a remote command's output an error
	// quotes: enough for install.sh's last messages.
	sshOutputTail = 2048
)

// sshKeyFile is the server's private key in KeyDir; its public key is
// beside it with ".pub".
const sshKeyFile = "id_ed25519"

// The config fields. Paths go into unit files and command lines on the
// host, so they are kept to characters that need no quoting there.
var (
	sshSafePath = regexp.MustCompile(`^/[A-Za-z0-9_./-]*$`)
	sshUser     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)
	sshHost     = regexp.MustCompile(`^[A-Za-z0-9.:_-]+$`)
	// machine names are Kubernetes names; they go into the agent's flags.
	sshMachineName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
)

// Schema: the host to reach and how, and where install.sh puts things.
// Nothing here is a secret: the key is the server's own.
func (d *SSH) Schema(context.Context) (Schema, error) {
	desc := "installs the agent on an existing host over SSH with the server's install.sh; the server authenticates with its own key (<data-dir>/drivers/ssh/id_ed25519.pub), which must be in the host user's authorized_keys"
	if pub, err := d.PublicKey(); err == nil {
		desc += ": " + pub
	}
	return Schema{Description: desc, Fields: []Field{
		{Name: "host", Type: FieldString, Required: true, Description: "address or name of the host"},
		{Name: "port", Type: FieldInteger, Default: "22", Description: "SSH port"},
		{Name: "user", Type: FieldString, Default: "root", Description: "user to log in as; not root needs sudo: true"},
		{Name: "hostKey", Type: FieldString, Required: true, Description: "the host's SSH public key in authorized_keys format (e.g. a line of /etc/ssh/ssh_host_ed25519_key.pub, checked out of band); no other key is accepted"},
		{Name: "sudo", Type: FieldBoolean, Default: "false", Description: "run install and uninstall with sudo -n (passwordless sudo for user)"},
		{Name: "init", Type: FieldString, Default: "auto", Description: "how the agent runs: systemd, openrc, none (detached, no init system: containers) or auto (what the host runs)"},
		{Name: "binDir", Type: FieldString, Default: "/usr/local/bin", Description: "where the agent and its uninstall script go (INSTALL_MUSTER_BIN_DIR)"},
		{Name: "dataDir", Type: FieldString, Default: "/var/lib/muster/agent", Description: "the agent's data dir (INSTALL_MUSTER_DATA_DIR)"},
		{Name: "serviceDir", Type: FieldString, Description: "where the unit (or init script), its 0600 env file and, with openrc or none, the pid file and log go (INSTALL_MUSTER_SYSTEMD_DIR); default per init"},
	}}, nil
}

// sshTarget is one host and how to install there, from a pool's config or
// a machine's state.
type sshTarget struct {
	host, user      string
	port            int
	hostKey         ssh.PublicKey
	hostKeyLine     string
	sudo            bool
	init            string
	binDir, dataDir string
	serviceDir      string
}

func (t sshTarget) addr() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// state is what remove and status need later, kept on the Machine: the
// pool's config may have moved on to another host by then.
func (t sshTarget) state() State {
	return State{"host": t.host, "port": strconv.Itoa(t.port), "user": t.user, "hostKey": t.hostKeyLine,
		"sudo": strconv.FormatBool(t.sudo), "binDir": t.binDir}
}

// parseTarget reads config, then lets state (what create recorded)
// override where the machine is. A config it refuses is a *ConfigError:
// Validate (admission) and Create make this same check.
func parseTarget(config map[string]string, state State) (sshTarget, error) {
	get := func(k, def string) string {
		if v, ok := state[k]; ok && v != "" {
			return v
		}
		if v, ok := config[k]; ok && v != "" {
			return v
		}
		return def
	}
	refuse := func(key, reason string, args ...any) (sshTarget, error) {
		return sshTarget{}, &ConfigError{Key: key, Value: get(key, ""), Reason: fmt.Sprintf(reason, args...)}
	}
	t := sshTarget{host: get("host", ""), user: get("user", "root"), init: get("init", "auto"),
		binDir: get("binDir", "/usr/local/bin"), dataDir: get("dataDir", ""), serviceDir: get("serviceDir", ""),
		hostKeyLine: strings.TrimSpace(get("hostKey", ""))}
	if !sshHost.MatchString(t.host) {
		return refuse("host", "driverConfig host %q is not a host name or address: set it to the host to install on", t.host)
	}
	port, err := strconv.Atoi(get("port", "22"))
	if err != nil || port < 1 || port > 65535 {
		return refuse("port", "driverConfig port %q is not a port (1-65535)", get("port", "22"))
	}
	t.port = port
	if !sshUser.MatchString(t.user) {
		return refuse("user", "driverConfig user %q is not a user name", t.user)
	}
	if t.sudo, err = strconv.ParseBool(get("sudo", "false")); err != nil {
		return refuse("sudo", "driverConfig sudo %q is not true or false", get("sudo", ""))
	}
	switch t.init {
	case "auto", "systemd", "openrc", "none":
	default:
		return refuse("init", "driverConfig init %q: use systemd, openrc, none or auto", t.init)
	}
	for _, k := range []string{"binDir", "dataDir", "serviceDir"} {
		if v := map[string]string{"binDir": t.binDir, "dataDir": t.dataDir, "serviceDir": t.serviceDir}[k]; v != "" && (!sshSafePath.MatchString(v) || v == "/") {
			return refuse(k, "driverConfig %s %q must be an absolute path other than / of letters, digits and _ . / -", k, v)
		}
	}
	if t.hostKeyLine == "" {
		return refuse("hostKey", "driverConfig hostKey is empty: set it to the host's public key (a line of /etc/ssh/ssh_host_ed25519_key.pub on the host, checked out of band); the driver trusts no host key it is not given")
	}
	if t.hostKey, _, _, _, err = ssh.ParseAuthorizedKey([]byte(t.hostKeyLine)); err != nil {
		return refuse("hostKey", "driverConfig hostKey is not a public key in authorized_keys format (\"ssh-ed25519 AAAA…\"): %v", err)
	}
	return t, nil
}

// Validate is the check Create makes of a pool's config before it
// reaches for the host, asked at admission so that a config the driver
// would refuse is never stored.
func (d *SSH) Validate(_ context.Context, config map[string]string) error {
	_, err := parseTarget(config, nil)
	return err
}

// PublicKey returns the server's SSH public key in authorized_keys format,
// making the key pair on first use.
func (d *SSH) PublicKey() (string, error) {
	_, pub, err := d.key()
	return pub, err
}

// key loads the server's key pair, or makes it: the private key 0600 in
// a 0700 dir, the public key 0644 beside it for the operator to copy.
func (d *SSH) key() (ssh.Signer, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.signer != nil {
		return d.signer, d.pub, nil
	}
	if d.KeyDir == "" {
		return nil, "", errors.New("the ssh driver has no key dir (a server bug: it is <data-dir>/drivers/ssh)")
	}
	path := filepath.Join(d.KeyDir, sshKeyFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		fi, err := os.Stat(path)
		if err != nil {
			return nil, "", err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, "", fmt.Errorf("the server's SSH key %s has mode %v, readable by others: run chmod 600 %s (and consider it exposed: delete it to make a new one, then authorize the new public key on the hosts)", path, fi.Mode().Perm(), path)
		}
		signer, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, "", fmt.Errorf("reading the server's SSH key %s: %v; delete it (and its .pub) to make a new one, then authorize the new public key on the hosts", path, err)
		}
		d.signer, d.pub = signer, authorizedLine(signer.PublicKey())
		// A pair made with ssh-keygen has its .pub; a lone private key
		// gets one, since the operator copies the public key from there.
		if _, err := os.Stat(path + ".pub"); errors.Is(err, os.ErrNotExist) {
			if err := atomicfile.Write(path+".pub", []byte(d.pub+"\n"), 0o644); err != nil {
				return nil, "", err
			}
		}
	case errors.Is(err, os.ErrNotExist):
		if d.signer, d.pub, err = makeSSHKey(d.KeyDir); err != nil {
			return nil, "", err
		}
		klog.InfoS("Made the SSH key of the ssh machine driver: add its public key to ~/.ssh/authorized_keys of the user each pool names on its hosts",
			"publicKey", d.pub, "file", path+".pub")
	default:
		return nil, "", fmt.Errorf("reading the server's SSH key: %w", err)
	}
	return d.signer, d.pub, nil
}

func authorizedLine(k ssh.PublicKey) string {
	host, _ := os.Hostname()
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " muster-server@" + host
}

func makeSSHKey(dir string) (ssh.Signer, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("making %s for the server's SSH key: %w", dir, err)
	}
	// MkdirAll keeps the mode of a dir that was there.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, "", err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "muster-server")
	if err != nil {
		return nil, "", err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, "", err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, "", err
	}
	line := authorizedLine(sshPub)
	path := filepath.Join(dir, sshKeyFile)
	if err := atomicfile.Write(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, "", err
	}
	if err := atomicfile.Write(path+".pub", []byte(line+"\n"), 0o644); err != nil {
		return nil, "", err
	}
	return signer, line, nil
}

// connect opens an SSH connection to t, trusting only its pinned host key.
func (d *SSH) connect(ctx context.Context, t sshTarget) (*ssh.Client, error) {
	signer, pub, err := d.key()
	if err != nil {
		return nil, err
	}
	pinned := t.hostKey
	cfg := &ssh.ClientConfig{
		User: t.user,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if bytes.Equal(key.Marshal(), pinned.Marshal()) {
				return nil
			}
			return fmt.Errorf("the host presented key %s %s, not the %s %s the pool pins in driverConfig hostKey: refusing to log in (someone may be in between; if the host was reinstalled, check its new key out of band and update the pool)",
				key.Type(), ssh.FingerprintSHA256(key), pinned.Type(), ssh.FingerprintSHA256(pinned))
		},
		// Ask for the pinned key's type: a host with several host keys
		// would otherwise present the one the client prefers.
		HostKeyAlgorithms: hostKeyAlgorithms(pinned),
		Timeout:           sshConnectTimeout,
	}
	dialCtx, cancel := context.WithTimeout(ctx, sshConnectTimeout)
	defer cancel()
	c, err := dial(dialCtx, t, cfg)
	if err != nil {
		// The operator who wrote the pool sees one message whatever the
		// network said: quoting "connection refused" or "handshake
		// failed: EOF" would make the driver a port scanner of every
		// host:port an operator names. The cause is in the server's log.
		klog.InfoS("The ssh driver could not reach or log in to a host", "address", t.addr(), "user", t.user, "err", err)
		return nil, fmt.Errorf("the ssh driver could not reach or log in to %s as %s; the server's log has the cause. Check that sshd runs there, that driverConfig hostKey is the host's key, and that the server's public key (kubectl get --raw /drivers/ssh) is in ~%s/.ssh/authorized_keys: %s",
			t.addr(), t.user, t.user, pub)
	}
	return c, nil
}

// dial connects and logs in; its errors are the network's and the host's
// own words, for the server's log only.
func dial(ctx context.Context, t sshTarget, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", t.addr())
	if err != nil {
		return nil, err
	}
	// The handshake has its own bound: a port that accepts and then says
	// nothing must not hold a create forever.
	_ = conn.SetDeadline(time.Now().Add(sshConnectTimeout))
	c, chans, reqs, err := ssh.NewClientConn(conn, t.addr(), cfg)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

func hostKeyAlgorithms(k ssh.PublicKey) []string {
	if k.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{k.Type()}
}

// tailBuffer keeps the last sshOutputTail bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > sshOutputTail {
		w.b = append([]byte(nil), w.b[len(w.b)-sshOutputTail:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.b))
}

// run runs script with sh on the host, as root with sudo if t says so.
// The script goes on the remote command line, so it never holds a secret:
// secrets go on stdin. It returns the command's output (stdout and stderr
// together, the last part of it).
func run(ctx context.Context, c *ssh.Client, t sshTarget, script string, stdin io.Reader, timeout time.Duration) (string, error) {
	s, err := c.NewSession()
	if err != nil {
		return "", fmt.Errorf("opening an SSH session on %s: %w", t.addr(), err)
	}
	defer s.Close()
	var out tailBuffer
	s.Stdout, s.Stderr, s.Stdin = &out, &out, stdin
	cmd := "sh -c " + shellQuote(script)
	if t.sudo {
		cmd = "sudo -n " + cmd
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Closing the connection ends the session; the remote shell gets
		// SIGHUP. What install.sh did so far is idempotent to redo.
		_ = c.Close()
		return out.String(), fmt.Errorf("the command on %s did not finish in %v (%w); its last output: %s", t.addr(), timeout, ctx.Err(), out.String())
	}
	return out.String(), err
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// probeScript says what the host has: "absent", "ours running",
// "ours stopped" or "other <command line>". The uninstall script install.sh
// writes records the agent's command line ("# exec: ..."), which names the
// machine (--node-name); the agent runs when a process has that command line.
// The line is matched by the shell itself: as an argument of grep it would
// be in a process's command line and match itself.
func probeScript(t sshTarget, name string) string {
	return ownAgent(t, name) + `if [ ! -d /proc/self ]; then echo ours running; exit 0; fi
for f in /proc/[0-9]*/cmdline; do
	c=$(tr '\000' ' ' <"$f" 2>/dev/null) || continue
	case "$c" in *"$line"*) echo ours running; exit 0 ;; esac
done
echo ours stopped
`
}

// ownAgent is the start of a script that goes on only when the agent
// installed on the host is this machine's: it prints "absent" or
// "other ..." and exits otherwise, and leaves the uninstall script in $u
// and the agent's command line in $line.
func ownAgent(t sshTarget, name string) string {
	return fmt.Sprintf(`u=%s/muster-agent-uninstall.sh
if [ ! -f "$u" ]; then echo absent; exit 0; fi
line=$(sed -n 's/^# exec: //p' "$u" | head -n 1)
case " $line " in
	*" --node-name %s "*) ;;
	"  ") echo "other (installed by an install.sh that does not record the machine)"; exit 0 ;;
	*) echo "other $line"; exit 0 ;;
esac
`, shellQuote(t.binDir), name)
}

// installScript reads the join token (first line of stdin) and install.sh
// (the rest) and runs install.sh with the token in its environment. The
// token is never in a command line, and only the 0600 env file install.sh
// writes keeps it.
func installScript(t sshTarget, serverURL, name string) string {
	env := []string{"INSTALL_MUSTER_BIN_DIR=" + shellQuote(t.binDir)}
	if t.init != "auto" {
		env = append(env, "INSTALL_MUSTER_INIT="+shellQuote(t.init))
	}
	if t.dataDir != "" {
		env = append(env, "INSTALL_MUSTER_DATA_DIR="+shellQuote(t.dataDir))
	}
	if t.serviceDir != "" {
		env = append(env, "INSTALL_MUSTER_SYSTEMD_DIR="+shellQuote(t.serviceDir))
	}
	return fmt.Sprintf(`set -eu
umask 077
IFS= read -r MUSTER_TOKEN || { echo "no join token on stdin" >&2; exit 2; }
export MUSTER_TOKEN
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cat >"$d/install.sh"
export %s
MUSTER_URL= MUSTER_TOKEN_FILE= INSTALL_MUSTER_EXEC= sh "$d/install.sh" agent --server %s --node-name %s
`, strings.Join(env, " "), shellQuote(serverURL), shellQuote(name))
}

// uninstallScript runs the uninstall script if it is the agent of this
// machine; anything else on the host is not the driver's to remove.
func uninstallScript(t sshTarget, name string) string {
	allow := ""
	if !t.sudo {
		// The uninstall script wants root; a user without sudo may have
		// installed into dirs it owns, and fails on its own if it cannot.
		allow = "INSTALL_MUSTER_ALLOW_NONROOT=1 "
	}
	return ownAgent(t, name) + allow + `sh "$u"
`
}

func checkMachineName(name string) error {
	if !sshMachineName.MatchString(name) {
		return fmt.Errorf("machine name %q is not a lowercase DNS name the agent can join under", name)
	}
	return nil
}

// probe reports what the host has for machine name.
func (d *SSH) probe(ctx context.Context, c *ssh.Client, t sshTarget, name string) (string, error) {
	out, err := run(ctx, c, t, probeScript(t, name), nil, sshCommandTimeout)
	if err != nil {
		return "", fmt.Errorf("checking for an installed agent on %s: %w (output: %s)", t.addr(), err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// Create installs and starts the agent of req.Name on the host, unless it
// is installed and running there already (a create repeated after a crash).
// A host that runs the agent of another machine is refused: one host is
// one machine.
func (d *SSH) Create(ctx context.Context, req CreateRequest) (State, error) {
	if err := checkMachineName(req.Name); err != nil {
		return nil, err
	}
	t, err := parseTarget(req.Config, nil)
	if err != nil {
		return nil, err
	}
	if len(d.Script) == 0 {
		return nil, errors.New("the ssh driver has no install script (a server bug)")
	}
	c, err := d.connect(ctx, t)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	have, err := d.probe(ctx, c, t, req.Name)
	if err != nil {
		return nil, err
	}
	switch {
	case have == "ours running":
		return t.state(), nil
	case strings.HasPrefix(have, "other"):
		return nil, fmt.Errorf("%s already has a muster-agent installed for another machine (%s): one host serves one machine; point the pool at another host, or run %s/muster-agent-uninstall.sh there if that agent is left over",
			t.addr(), strings.TrimSpace(strings.TrimPrefix(have, "other")), t.binDir)
	}
	// Absent, or installed for this machine and not running (an install
	// cut short): install.sh is safe to run again, and the token is not
	// used until the agent joins.
	stdin := io.MultiReader(strings.NewReader(req.Bootstrap.Token+"\n"), bytes.NewReader(d.Script))
	out, err := run(ctx, c, t, installScript(t, req.Bootstrap.ServerURL, req.Name), stdin, sshInstallTimeout)
	// install.sh prints no token, but an error message must never carry it.
	out = strings.ReplaceAll(out, req.Bootstrap.Token, "<join token>")
	if err != nil {
		hint := ""
		if t.sudo {
			hint = " (sudo -n needs passwordless sudo for " + t.user + ")"
		}
		return nil, fmt.Errorf("installing the agent on %s failed%s: %v; install.sh said: %s", t.addr(), hint, redactErr(err, req.Bootstrap.Token), out)
	}
	klog.V(2).InfoS("Installed the agent over SSH", "machine", req.Name, "host", t.addr())
	return t.state(), nil
}

func redactErr(err error, secret string) string {
	if secret == "" {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), secret, "<join token>")
}

// Remove uninstalls the machine's agent; a host without it (never
// installed, already removed, or running another machine's agent) is done.
func (d *SSH) Remove(ctx context.Context, req HostRequest) error {
	if err := checkMachineName(req.Name); err != nil {
		return err
	}
	t, err := parseTarget(req.Config, req.State)
	if err != nil {
		return err
	}
	c, err := d.connect(ctx, t)
	if err != nil {
		return err
	}
	defer c.Close()
	out, err := run(ctx, c, t, uninstallScript(t, req.Name), nil, sshCommandTimeout)
	if err != nil {
		return fmt.Errorf("uninstalling the agent of %s on %s failed: %v; output: %s (run %s/muster-agent-uninstall.sh there by hand if it keeps failing)", req.Name, t.addr(), err, out, t.binDir)
	}
	return nil
}

// Status: the host exists for the machine while its agent is installed
// there.
func (d *SSH) Status(ctx context.Context, req HostRequest) (Status, error) {
	if err := checkMachineName(req.Name); err != nil {
		return Status{}, err
	}
	t, err := parseTarget(req.Config, req.State)
	if err != nil {
		return Status{}, err
	}
	c, err := d.connect(ctx, t)
	if err != nil {
		return Status{}, err
	}
	defer c.Close()
	have, err := d.probe(ctx, c, t, req.Name)
	if err != nil {
		return Status{}, err
	}
	return Status{Exists: strings.HasPrefix(have, "ours")}, nil
}

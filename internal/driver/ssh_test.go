package driver

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/muster-io/muster/internal/testenv/sshtest"
)

// authorize lets the driver's key into the test host.
func authorize(t *testing.T, s *sshtest.Host, d *SSH) {
	t.Helper()
	pub, err := d.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	s.Authorize(t, pub)
}

func sshConfig(s *sshtest.Host, binDir string) map[string]string {
	return map[string]string{"host": "127.0.0.1", "port": strconv.Itoa(s.Port), "user": s.User, "hostKey": s.HostKey,
		"binDir": binDir, "init": "none"}
}

// fakeInstall stands in for install.sh: it records what it was given and
// what the host's process table showed while it ran, starts a stand-in
// agent whose command line names the machine, and writes an uninstall
// script with the "# exec:" line the real one has.
const fakeInstall = `#!/bin/sh
set -eu
bin=$INSTALL_MUSTER_BIN_DIR
rec=$bin/../record
mkdir -p "$bin" "$rec"
echo "$*" >>"$rec/installs"
echo "$INSTALL_MUSTER_INIT" >"$rec/init"
printf '%s' "$MUSTER_TOKEN" >"$rec/token"
for f in /proc/[0-9]*/cmdline; do tr '\000' ' ' <"$f" 2>/dev/null || true; echo; done >"$rec/ps"
printf '#!/bin/sh\nwhile :; do sleep 1; done\n' >"$bin/fake-agent"
chmod 0755 "$bin/fake-agent"
line="$bin/fake-agent --server $3 --node-name $5"
cat >"$bin/muster-agent-uninstall.sh" <<EOF
#!/bin/sh
# exec: $line
[ -n "\${INSTALL_MUSTER_ALLOW_NONROOT:-}" ] || [ "\$(id -u)" -eq 0 ] || exit 1
kill \$(cat "$rec/pid") 2>/dev/null
rm -f "$bin/fake-agent" "$bin/muster-agent-uninstall.sh"
echo "$5" >>"$rec/uninstalls"
EOF
setsid $line >/dev/null 2>&1 </dev/null &
echo $! >"$rec/pid"
`

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSSHDriver: against a real sshd, create installs once with the token
// passed on stdin (never in any process's command line, nor in the state
// or sshd's log), a repeated create does not install again, a host that
// has another machine's agent is refused, a stopped agent is installed
// again, and remove uninstalls and succeeds when there is nothing left.
func TestSSHDriver(t *testing.T) {
	s := sshtest.Start(t)
	root := t.TempDir()
	binDir, rec := filepath.Join(root, "bin"), filepath.Join(root, "record")
	d := &SSH{KeyDir: filepath.Join(t.TempDir(), "drivers", "ssh"), Script: []byte(fakeInstall)}
	authorize(t, s, d)
	ctx := context.Background()
	cfg := sshConfig(s, binDir)
	const token = "K10aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa::abcdef.0123456789abcdef0123456789abcdef"
	req := CreateRequest{Name: "edge-abc12", Config: cfg, Bootstrap: Bootstrap{ServerURL: "https://127.0.0.1:9443", Token: token}}

	if st, err := d.Status(ctx, HostRequest{Name: req.Name, Config: cfg}); err != nil || st.Exists {
		t.Fatalf("status before create: %+v %v, want not existing", st, err)
	}
	state, err := d.Create(ctx, req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if state["host"] != "127.0.0.1" || state["port"] != strconv.Itoa(s.Port) || state["user"] != s.User {
		t.Errorf("state %v does not name the host, port and user", state)
	}
	for k, v := range state {
		if strings.Contains(v, "abcdef") {
			t.Errorf("state %s holds the token", k)
		}
	}
	if got := readFile(t, filepath.Join(rec, "token")); got != token {
		t.Errorf("the install script got token %q, want the join token", got)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(rec, "init"))); got != "none" {
		t.Errorf("INSTALL_MUSTER_INIT=%q, want none from the config", got)
	}
	ps := readFile(t, filepath.Join(rec, "ps"))
	if !strings.Contains(ps, "sh -c") {
		t.Fatalf("the process table the install script saw does not show its own shell:\n%s", ps)
	}
	for _, where := range []struct{ name, text string }{{"a command line on the host", ps}, {"sshd's log", s.Log()}} {
		if strings.Contains(where.text, "0123456789abcdef") {
			t.Errorf("the join token is in %s", where.name)
		}
	}
	if st, err := d.Status(ctx, HostRequest{Name: req.Name, Config: cfg, State: state}); err != nil || !st.Exists {
		t.Fatalf("status after create: %+v %v, want existing", st, err)
	}

	// The server's key: 0600 in a 0700 dir, the public key 0644 beside it.
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{d.KeyDir, 0o700}, {filepath.Join(d.KeyDir, "id_ed25519"), 0o600}, {filepath.Join(d.KeyDir, "id_ed25519.pub"), 0o644}} {
		fi, err := os.Stat(f.path)
		if err != nil || fi.Mode().Perm() != f.mode {
			t.Errorf("%s: %v %v, want mode %v", f.path, fi.Mode().Perm(), err, f.mode)
		}
	}

	installs := func() int { return strings.Count(readFile(t, filepath.Join(rec, "installs")), "\n") }
	steps := []struct {
		name     string
		before   func()
		machine  string
		wantErr  string
		installs int
	}{
		{name: "repeated create of a running agent installs nothing", machine: req.Name, installs: 1},
		{name: "another machine on the same host is refused", machine: "edge-other", wantErr: "another machine", installs: 1},
		{name: "a stopped agent is installed again", machine: req.Name, installs: 2, before: func() {
			pid, _ := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(rec, "pid"))))
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitUntil(t, 10*time.Second, "the stand-in agent to stop", func() bool {
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				return err != nil || strings.Contains(string(stat), ") Z ")
			})
		}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if step.before != nil {
				step.before()
			}
			r := req
			r.Name = step.machine
			_, err := d.Create(ctx, r)
			if step.wantErr == "" && err != nil {
				t.Fatalf("create: %v", err)
			}
			if step.wantErr != "" && (err == nil || !strings.Contains(err.Error(), step.wantErr)) {
				t.Fatalf("create: %v, want an error about %q", err, step.wantErr)
			}
			if got := installs(); got != step.installs {
				t.Errorf("install ran %d times, want %d", got, step.installs)
			}
		})
	}

	// Another machine's remove leaves this one's agent alone.
	if err := d.Remove(ctx, HostRequest{Name: "edge-other", Config: cfg}); err != nil {
		t.Fatalf("remove of a machine the host does not run: %v", err)
	}
	if readFile(t, filepath.Join(rec, "uninstalls")) != "" {
		t.Fatalf("removing another machine ran the uninstall script")
	}
	// Remove reads where the machine is from its state, not the (changed) config.
	moved := map[string]string{"host": "192.0.2.1", "hostKey": s.HostKey}
	if err := d.Remove(ctx, HostRequest{Name: req.Name, Config: moved, State: state}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(rec, "uninstalls"))); got != req.Name {
		t.Errorf("uninstalled %q, want %s", got, req.Name)
	}
	if st, err := d.Status(ctx, HostRequest{Name: req.Name, Config: cfg, State: state}); err != nil || st.Exists {
		t.Fatalf("status after remove: %+v %v, want not existing", st, err)
	}
	if err := d.Remove(ctx, HostRequest{Name: req.Name, Config: cfg, State: state}); err != nil {
		t.Fatalf("a second remove: %v, want success", err)
	}
}

// TestSSHDriverRefuses: the driver logs in nowhere it cannot verify, and
// says what the operator must do; nothing is installed. Whatever the
// network or the host said (a closed port, a port that is not SSH,
// another host key, the server's key not authorized), the message is the
// same but for the address: what an operator reads back from a Machine
// must not tell an open port from a closed one (issue 27).
func TestSSHDriverRefuses(t *testing.T) {
	s := sshtest.Start(t)
	otherKey, _, _ := ed25519.GenerateKey(rand.Reader)
	other, err := ssh.NewPublicKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	authorized := &SSH{KeyDir: filepath.Join(t.TempDir(), "k"), Script: []byte(fakeInstall)}
	authorize(t, s, authorized)
	authorizedPub, err := authorized.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	unknown := &SSH{KeyDir: filepath.Join(t.TempDir(), "k"), Script: []byte(fakeInstall)}
	unknownPub, err := unknown.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := strconv.Itoa(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	// Ports that answer but are not SSH: one hangs up at once, one speaks
	// another protocol.
	notSSH := func(greeting string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(greeting))
				c.Close()
			}
		}()
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	hangUp, http := notSSH(""), notSSH("HTTP/1.1 400 Bad Request\r\n\r\n")

	const unreachable = "could not reach or log in to"
	normalized := map[string]string{} // case -> message without address and key
	for _, tc := range []struct {
		name   string
		d      *SSH
		pub    string
		change map[string]string
		want   []string
	}{
		{"another host key", authorized, authorizedPub, map[string]string{"hostKey": string(ssh.MarshalAuthorizedKey(other))}, []string{unreachable, "hostKey"}},
		{"the server's key not authorized", unknown, unknownPub, nil, []string{unreachable, "authorized_keys", unknownPub}},
		{"nothing listening", authorized, authorizedPub, map[string]string{"port": closedPort}, []string{unreachable, "sshd runs there"}},
		{"a port that hangs up", authorized, authorizedPub, map[string]string{"port": hangUp}, []string{unreachable}},
		{"a port that speaks HTTP", authorized, authorizedPub, map[string]string{"port": http}, []string{unreachable}},
		{"a host key that does not parse", authorized, "", map[string]string{"hostKey": "ssh-ed25519 nonsense"}, []string{"authorized_keys format"}},
		{"no host key", authorized, "", map[string]string{"hostKey": ""}, []string{"hostKey is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			cfg := sshConfig(s, filepath.Join(root, "bin"))
			for k, v := range tc.change {
				cfg[k] = v
			}
			_, err := tc.d.Create(context.Background(), CreateRequest{Name: "edge-x", Config: cfg,
				Bootstrap: Bootstrap{ServerURL: "https://127.0.0.1:1", Token: "K10secret"}})
			if err == nil {
				t.Fatal("create succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "K10secret") {
				t.Errorf("the error holds the token: %v", err)
			}
			if _, err := os.Stat(filepath.Join(root, "record")); err == nil {
				t.Errorf("the install script ran")
			}
			if tc.pub != "" {
				msg := strings.ReplaceAll(err.Error(), net.JoinHostPort(cfg["host"], cfg["port"]), "ADDR")
				normalized[tc.name] = strings.ReplaceAll(msg, tc.pub, "KEY")
			}
		})
	}
	var first string
	for name, msg := range normalized {
		if first == "" {
			first = msg
		}
		if msg != first {
			t.Errorf("%s: the message %q differs from %q: it tells the operator what the network said", name, msg, first)
		}
		for _, leak := range []string{"refused", "EOF", "handshake", "SHA256:", "HTTP"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: the message quotes the network (%q): %s", name, leak, msg)
			}
		}
	}
	if len(normalized) != 5 {
		t.Errorf("compared %d connection failures, want 5", len(normalized))
	}
}

// TestSSHConfig: config is checked before anything connects.
func TestSSHConfig(t *testing.T) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	for _, tc := range []struct {
		name   string
		config map[string]string
		want   string // "" for valid
	}{
		{"defaults", map[string]string{"host": "h.example", "hostKey": key}, ""},
		{"all set", map[string]string{"host": "10.0.0.1", "hostKey": key, "port": "2222", "user": "ops", "sudo": "true", "init": "openrc", "binDir": "/opt/bin", "dataDir": "/srv/muster", "serviceDir": "/etc/muster"}, ""},
		{"no host", map[string]string{"hostKey": key}, "host"},
		{"host with a space", map[string]string{"host": "a b", "hostKey": key}, "host"},
		{"port out of range", map[string]string{"host": "h", "hostKey": key, "port": "70000"}, "port"},
		{"user with a quote", map[string]string{"host": "h", "hostKey": key, "user": "a'b"}, "user"},
		{"sudo not boolean", map[string]string{"host": "h", "hostKey": key, "sudo": "maybe"}, "sudo"},
		{"unknown init", map[string]string{"host": "h", "hostKey": key, "init": "runit"}, "init"},
		{"relative bin dir", map[string]string{"host": "h", "hostKey": key, "binDir": "bin"}, "binDir"},
		{"data dir with a space", map[string]string{"host": "h", "hostKey": key, "dataDir": "/a b"}, "dataDir"},
		{"root as data dir", map[string]string{"host": "h", "hostKey": key, "dataDir": "/"}, "dataDir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, err := parseTarget(tc.config, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if target.port == 0 || target.user == "" || target.binDir == "" {
					t.Errorf("defaults not applied: %+v", target)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	// The schema offers exactly what parseTarget reads, and checks it.
	schema, err := (&SSH{KeyDir: t.TempDir()}).Schema(context.Background())
	if err != nil || schema.Valid() != nil {
		t.Fatalf("schema: %v %v", err, schema.Valid())
	}
	if p := schema.Check(map[string]string{"host": "h", "hostKey": key, "password": "x"}); p["password"] == "" {
		t.Errorf("the schema accepts a password field: %v", p)
	}
	if !strings.Contains(schema.Description, "ssh-ed25519 ") {
		t.Errorf("the schema's description does not show the server's public key: %s", schema.Description)
	}
}

// TestSSHScriptsHoldNoSecret: the command lines the driver sends name no
// token; the token goes only on stdin.
func TestSSHScriptsHoldNoSecret(t *testing.T) {
	target := sshTarget{binDir: "/usr/local/bin", init: "none", dataDir: "/var/lib/muster/agent"}
	for name, script := range map[string]string{
		"install":   installScript(target, "https://s:9443", "m1"),
		"probe":     probeScript(target, "m1"),
		"uninstall": uninstallScript(target, "m1"),
	} {
		if strings.Contains(script, "K10") {
			t.Errorf("the %s script holds a token", name)
		}
		if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("the %s script does not parse: %v %s", name, err, out)
		}
	}
}

// TestSSHDriverForeignInstall: an uninstall script that does not record its
// machine (an older install.sh, an install by hand) is not this driver's:
// create refuses the host and remove leaves it alone.
func TestSSHDriverForeignInstall(t *testing.T) {
	s := sshtest.Start(t)
	binDir := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(binDir, "ran")
	uninstall := "#!/bin/sh\n# Removes what install.sh installed for muster-agent.\ntouch " + marker + "\n"
	if err := os.WriteFile(filepath.Join(binDir, "muster-agent-uninstall.sh"), []byte(uninstall), 0o755); err != nil {
		t.Fatal(err)
	}
	d := &SSH{KeyDir: filepath.Join(t.TempDir(), "k"), Script: []byte(fakeInstall)}
	authorize(t, s, d)
	cfg := sshConfig(s, binDir)
	_, err := d.Create(context.Background(), CreateRequest{Name: "edge-y", Config: cfg, Bootstrap: Bootstrap{ServerURL: "https://127.0.0.1:1", Token: "K10x"}})
	if err == nil || !strings.Contains(err.Error(), "does not record the machine") {
		t.Fatalf("create on a host with a foreign install: %v, want a refusal saying so", err)
	}
	if err := d.Remove(context.Background(), HostRequest{Name: "edge-y", Config: cfg}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("remove ran an uninstall script that is not the machine's")
	}
}

// TestSSHDriverKeygenKey: a key pair the operator made with ssh-keygen
// before the first pool is the one the driver uses; a missing .pub is
// written back.
func TestSSHDriverKeygenKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "op", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen (openssh-client): %v %s", err, out)
	}
	made := strings.Fields(readFile(t, key+".pub"))
	if err := os.Remove(key + ".pub"); err != nil {
		t.Fatal(err)
	}
	pub, err := (&SSH{KeyDir: dir}).PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(pub); got[0] != made[0] || got[1] != made[1] {
		t.Errorf("the driver's public key %q is not ssh-keygen's %q", pub, made)
	}
	if got := strings.Fields(readFile(t, key+".pub")); len(got) < 2 || got[1] != made[1] {
		t.Errorf("the .pub was not written back: %q", got)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (&SSH{KeyDir: dir}).PublicKey(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a private key readable by others: %v, want a refusal saying chmod 600", err)
	}
}

package e2e

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// installRoot is a throwaway root for install.sh: every path the script
// writes is under it, given through the INSTALL_MUSTER_* variables.
type installRoot struct {
	dir                         string
	binDir, systemdDir, dataDir string
}

func newInstallRoot(t *testing.T) installRoot {
	// Under /tmp rather than t.TempDir(): systemd-analyze refuses unit
	// paths with characters a test name puts in t.TempDir().
	dir, err := os.MkdirTemp("", "muster-install-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return installRoot{dir: dir, binDir: filepath.Join(dir, "usr/local/bin"), systemdDir: filepath.Join(dir, "etc/systemd/system"), dataDir: filepath.Join(dir, "var/lib/muster/agent")}
}

func (r installRoot) env(extra ...string) []string {
	return append(append(os.Environ(),
		"INSTALL_MUSTER_BIN_DIR="+r.binDir, "INSTALL_MUSTER_SYSTEMD_DIR="+r.systemdDir, "INSTALL_MUSTER_DATA_DIR="+r.dataDir,
		"INSTALL_MUSTER_INIT=systemd", "INSTALL_MUSTER_SKIP_START=true", "INSTALL_MUSTER_ALLOW_NONROOT=1",
		"MUSTER_TOKEN=", "MUSTER_URL="), extra...)
}

// files lists every file (not directory) under the root.
func (r installRoot) files(t *testing.T) []string {
	var out []string
	_ = filepath.Walk(r.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out = append(out, strings.TrimPrefix(p, r.dir))
		}
		return nil
	})
	return out
}

// pipeInstall runs install.sh with ARGS, fetched by curl with the CA already
// pinned for it. The README's own command, which pins the CA first, is run
// as written by TestReadmeInstall.
func pipeInstall(t *testing.T, s *server, base string, r installRoot, args ...string) (string, error) {
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, s.caPEM(t), 0o644); err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + a + "'"
	}
	// pipefail: a failed download must fail the test, not run an empty script.
	cmd := exec.Command("bash", "-o", "pipefail", "-c", "curl -sfL --cacert "+ca+" "+base+"/install.sh | sh -s - "+strings.Join(quoted, " "))
	cmd.Env = r.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func fileSHA256(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// unitExecStart reads the unit's ExecStart and EnvironmentFile.
func unitExecStart(t *testing.T, unit string) (argv []string, envFile string) {
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			argv = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "EnvironmentFile=-"); ok {
			envFile = v
		}
	}
	if len(argv) == 0 || envFile == "" {
		t.Fatalf("%s has no ExecStart or EnvironmentFile", unit)
	}
	return argv, envFile
}

func mode(t *testing.T, path string) os.FileMode {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return fi.Mode().Perm()
}

// TestInstallScript: one piped command installs the agent as a service in a
// throwaway root with the right modes; systemd accepts the unit; the unit's
// own command joins the machine; the uninstall script removes every file.
func TestInstallScript(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Fatalf("install.sh installs on Linux; this test runs on %s", runtime.GOOS)
	}
	s := startServer(t, "")
	token := newToken(t, s)
	r := newInstallRoot(t)

	start := time.Now()
	out, err := pipeInstall(t, s, s.url(), r, "agent", "--token", token, "--server", s.url(), "--node-name", "installed-1")
	if err != nil {
		t.Fatalf("install.sh agent: %v\n%s", err, out)
	}
	binary := filepath.Join(r.binDir, "muster-agent")
	unit := filepath.Join(r.systemdDir, "muster-agent.service")
	envFile := filepath.Join(r.systemdDir, "muster-agent.service.env")
	uninstall := filepath.Join(r.binDir, "muster-agent-uninstall.sh")
	for path, want := range map[string]os.FileMode{binary: 0o755, unit: 0o644, envFile: 0o600, uninstall: 0o755} {
		if got := mode(t, path); got != want {
			t.Errorf("%s has mode %v, want %v", path, got, want)
		}
	}
	if got, want := fileSHA256(t, binary), fileSHA256(t, agentBin); got != want {
		t.Errorf("installed binary's SHA-256 %s is not the served agent's %s", got, want)
	}
	unitText, _ := os.ReadFile(unit)
	envText, _ := os.ReadFile(envFile)
	if strings.Contains(string(unitText), bearerOf(token)) {
		t.Errorf("the join token's secret is in the unit file:\n%s", unitText)
	}
	if !strings.Contains(string(envText), "MUSTER_TOKEN="+token) {
		t.Errorf("the env file does not hold the token:\n%s", envText)
	}
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
	if out, err := exec.Command("shellcheck", "-s", "sh", uninstall).CombinedOutput(); err != nil {
		t.Errorf("shellcheck of the generated uninstall script: %v\n%s", err, out)
	}

	// What systemd would run: ExecStart with the env file's variables.
	argv, env := unitExecStart(t, unit)
	if env != envFile {
		t.Errorf("the unit reads %s, the script wrote %s", env, envFile)
	}
	a := runAgentBinaryEnv(t, []string{"MUSTER_TOKEN=" + strings.TrimPrefix(strings.TrimSpace(string(envText)), "MUSTER_TOKEN=")}, argv[1:]...)
	waitFor(t, 60*time.Second, "the installed agent's Machine to be Running", func() bool {
		phase, _ := s.kubectl("get", "machine", "installed-1", "-o", "jsonpath={.status.phase}")
		return phase == "Running"
	})
	t.Logf("install.sh to Running: %v", time.Since(start).Round(time.Millisecond))
	a.kill()

	// What an agent upgrade keeps beside the binary goes too.
	if err := os.WriteFile(binary+".previous", []byte("an earlier agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	said, err := exec.Command("sh", uninstall).CombinedOutput()
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, said)
	}
	if left := r.files(t); len(left) != 0 {
		t.Errorf("uninstall left files behind: %v", left)
	}
	// It says what it removes, the data dir and what that holds included.
	for _, want := range []string{binary + ".previous", "its data dir", "node password"} {
		if !strings.Contains(string(said), want) {
			t.Errorf("the uninstall script does not say it removes %q:\n%s", want, said)
		}
	}
}

// TestInstallScriptRefuses: a token whose CA hash is not the server's stops
// the script before it downloads anything; a binary whose SHA-256 is not the
// one published stops it before it installs anything.
func TestInstallScriptRefuses(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)

	t.Run("tampered CA hash", func(t *testing.T) {
		r := newInstallRoot(t)
		hash := token[3:67]
		flipped := "0"
		if hash[0] == '0' {
			flipped = "1"
		}
		bad := "K10" + flipped + hash[1:] + token[67:]
		out, err := pipeInstall(t, s, s.url(), r, "agent", "--token", bad, "--server", s.url())
		if err == nil || !strings.Contains(out, "refusing to trust this server") {
			t.Fatalf("install.sh with a tampered CA hash: %v\n%s", err, out)
		}
		if strings.Contains(out, "downloaded muster-agent") {
			t.Errorf("the script downloaded something before refusing:\n%s", out)
		}
		if left := r.files(t); len(left) != 0 {
			t.Errorf("a refused install left files: %v", left)
		}
	})

	t.Run("binary sha256 mismatch", func(t *testing.T) {
		// A mirror that holds the server's certificate serves the real CA
		// and checksum, but a different binary.
		proxy := tamperingMirror(t, s)
		r := newInstallRoot(t)
		out, err := pipeInstall(t, s, proxy, r, "agent", "--token", token, "--server", proxy)
		if err == nil || !strings.Contains(out, "refusing to install it") {
			t.Fatalf("install.sh with a tampered binary: %v\n%s", err, out)
		}
		if left := r.files(t); len(left) != 0 {
			t.Errorf("a refused install left files: %v", left)
		}
	})
}

// tamperingMirror serves everything from s but the agent binary, which it
// corrupts, with s's own serving certificate.
func tamperingMirror(t *testing.T, s *server) string {
	cert, err := tls.LoadX509KeyPair(filepath.Join(s.dataDir, "tls", "serving.crt"), filepath.Join(s.dataDir, "tls", "serving.key"))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(s.url())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}
	rp.ModifyResponse = func(resp *http.Response) error {
		p := resp.Request.URL.Path
		if strings.HasPrefix(p, "/assets/muster-agent-") && !strings.HasSuffix(p, ".sha256") {
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			body[len(body)/2] ^= 0xff
			resp.Body = io.NopCloser(strings.NewReader(string(body)))
		}
		return nil
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rp}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + l.Addr().(*net.TCPAddr).String()
}

// TestInstallShellcheck: the served install script is clean under shellcheck.
func TestInstallShellcheck(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Fatalf("shellcheck is not installed (apt-get install shellcheck; .ci/run installs it): %v", err)
	}
	s := startServer(t, "")
	code, body, err := s.get("/install.sh")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /install.sh: %d %v", code, err)
	}
	script := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(script, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("shellcheck", "-s", "sh", script).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck install.sh: %v\n%s", err, out)
	}
	if out, err := exec.Command("shellcheck", "-s", "sh", filepath.Join("..", "..", "hack", "peer.sh")).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck hack/peer.sh: %v\n%s", err, out)
	}
}

// TestWithAgent: muster-server --with-agent joins its own host with no
// token typed by anyone, and after a restart the host is the same machine,
// not a new registration.
func TestWithAgent(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", "--with-agent")
	host, _ := os.Hostname()
	host = strings.ToLower(host)
	running := func() bool {
		phase, _ := s.kubectl("get", "machine", host, "-o", "jsonpath={.status.phase}")
		return phase == "Running"
	}
	waitFor(t, 60*time.Second, "the server's own host to be a Running machine", running)
	count := func(kind string) int {
		out := strings.TrimSpace(s.mustKubectl("get", kind, "-o", "name"))
		if out == "" {
			return 0
		}
		return len(strings.Split(out, "\n"))
	}
	regs, tokens := count("clusterregistrations"), count("clusterregistrationtokens")
	uid := s.mustKubectl("get", "machine", host, "-o", "jsonpath={.metadata.uid}")

	s.stop()
	s.start()
	waitFor(t, 60*time.Second, "the host's machine to be Running after the restart", running)
	if got := count("clusterregistrations"); got != regs {
		t.Errorf("registrations: %d before the restart, %d after: the host re-registered", regs, got)
	}
	if got := count("clusterregistrationtokens"); got != tokens {
		t.Errorf("join tokens: %d before the restart, %d after: the server minted another", tokens, got)
	}
	if got := s.mustKubectl("get", "machine", host, "-o", "jsonpath={.metadata.uid}"); got != uid {
		t.Errorf("the host's Machine was replaced: uid %s, then %s", uid, got)
	}
}

// TestInstallScriptServer: `install.sh server` installs muster-server as a
// service that also runs its host's agent, its server token in the 0600
// env file, and its uninstall script removes it all.
func TestInstallScriptServer(t *testing.T) {
	t.Parallel()
	r := newInstallRoot(t)
	if err := os.MkdirAll(r.binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(serverBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.binDir, "muster-server"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "server-token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", filepath.Join("..", "..", "internal", "install", "install.sh"), "server", "--token-file", tokenFile, "--https-port", "19443")
	cmd.Env = r.env("INSTALL_MUSTER_SKIP_DOWNLOAD=true", "INSTALL_MUSTER_DATA_DIR="+filepath.Join(r.dir, "var/lib/muster/server"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install.sh server: %v\n%s", err, out)
	}
	unit := filepath.Join(r.systemdDir, "muster-server.service")
	argv, envFile := unitExecStart(t, unit)
	if got := strings.Join(argv, " "); !strings.Contains(got, "--with-agent") || !strings.Contains(got, "--https-port 19443") || strings.Contains(got, "0123456789abcdef") {
		t.Errorf("server unit ExecStart %q: want --with-agent and the extra flag, and no token", got)
	}
	if env, _ := os.ReadFile(envFile); !strings.Contains(string(env), "MUSTER_TOKEN=0123456789abcdef0123456789abcdef") || mode(t, envFile) != 0o600 {
		t.Errorf("server env file %s (mode %v): %s", envFile, mode(t, envFile), env)
	}
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
	said, err := exec.Command("sh", filepath.Join(r.binDir, "muster-server-uninstall.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, said)
	}
	if left := r.files(t); len(left) != 0 {
		t.Errorf("uninstall left files behind: %v", left)
	}
	// A server's data dir is its datastore and CA: the script says so.
	for _, want := range []string{"the datastore (SQLite), the CA", "datastore snapshot"} {
		if !strings.Contains(string(said), want) {
			t.Errorf("the server's uninstall script does not warn %q:\n%s", want, said)
		}
	}
}

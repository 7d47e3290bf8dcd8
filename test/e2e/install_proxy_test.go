package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstallScriptThroughProxy: on a host whose only way to the server is
// an HTTP proxy (a network namespace, as in TestProxyOnlyRoute), install.sh
// run with HTTPS_PROXY downloads the CA and the agent through the proxy,
// writes the proxy settings into the service's env file, and the service's
// own command, with that env file, joins through the proxy.
func TestInstallScriptThroughProxy(t *testing.T) {
	t.Parallel()
	n := newNetns(t)
	serverIP := addUnroutedAddress(t, n)
	s := newServer(t, serverIP, "")
	s.start()
	proxy := startTinyproxy(t, n.hostIP, s.port)

	code, script, err := s.get("/install.sh")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /install.sh: %d %v", code, err)
	}
	scriptPath := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(scriptPath, script, 0o644); err != nil {
		t.Fatal(err)
	}
	r := newInstallRoot(t)
	proxyURL := proxy.url(proxy.password)
	token := newToken(t, s)
	cmd := exec.Command("ip", "netns", "exec", n.name, "sh", scriptPath, "agent", "--token", token, "--server", s.url(), "--node-name", "installed-px")
	cmd.Env = r.env("HTTPS_PROXY="+proxyURL, "no_proxy=registry.example.internal,10.99.0.0/16")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh through the proxy: %v\n%s\n--- proxy log ---\n%s", err, out, proxy.log())
	}
	if strings.Contains(string(out), proxy.password) {
		t.Errorf("install.sh printed the proxy password:\n%s", out)
	}
	// The downloads went through the proxy: /cacerts, the checksum, the binary.
	want := fmt.Sprintf("%s -> %s:%d", n.nsIP, serverIP, s.port)
	if got := proxy.requests(); len(got) < 3 || strings.Count(strings.Join(got, "\n"), want) != len(got) {
		t.Errorf("the proxy's CONNECTs %v, want at least 3, all %s", got, want)
	}

	unit := filepath.Join(r.systemdDir, "muster-agent.service")
	envFile := filepath.Join(r.systemdDir, "muster-agent.service.env")
	envText, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"HTTPS_PROXY=" + proxyURL, "no_proxy=registry.example.internal,10.99.0.0/16"} {
		if !strings.Contains(string(envText), line+"\n") {
			t.Errorf("the service's env file lacks %q", line)
		}
	}
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}

	// What systemd would run: ExecStart with the env file's variables,
	// inside the namespace, which reaches the server only through the proxy.
	argv, _ := unitExecStart(t, unit)
	env := strings.Fields(string(envText))
	agent := &agentProc{t: t, log: &syncBuffer{}, exited: make(chan struct{})}
	agent.cmd = exec.Command("ip", append(append([]string{"netns", "exec", n.name, "env"}, env...), argv...)...)
	agent.cmd.Stdout, agent.cmd.Stderr = agent.log, agent.log
	if err := agent.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = agent.cmd.Wait(); close(agent.exited) }()
	t.Cleanup(func() {
		agent.kill()
		if t.Failed() {
			t.Logf("the installed agent's output:\n%s", lastLines(agent.log.String(), 40))
		}
	})
	// kubectl wait fails at once on a Machine not created yet.
	agent.waitOutput("running as machine", 60*time.Second)
	waitPhase(t, s, "installed-px", "Running", 60*time.Second)
	agent.waitOutput("connecting to servers through the proxy http://"+proxy.listen, time.Second)
}

// TestInstallScriptBadProxy: a malformed proxy variable or an IPv6 server
// address without brackets stops install.sh before it downloads or writes
// anything, with an error that says what to write instead and never
// repeats a password.
func TestInstallScriptBadProxy(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("../../internal/install/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	token := "K10" + strings.Repeat("a", 64) + "::abcdef.0123456789abcdef"
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"port not a number", []string{"HTTPS_PROXY=http://alice:hunter2@proxy.example:port"}, nil, "HTTPS_PROXY (http://proxy.example:port): the port 'port' is not a number"},
		{"port out of range", []string{"https_proxy=proxy.example:70000"}, nil, "https_proxy (proxy.example:70000): the port 70000 is out of range"},
		{"socks", []string{"HTTP_PROXY=socks5://proxy.example:1080"}, nil, "only http:// and https:// proxies are supported"},
		{"a path", []string{"HTTPS_PROXY=http://proxy.example:3128/wpad.dat"}, nil, "has a path"},
		{"IPv6 proxy without brackets", []string{"HTTPS_PROXY=http://2001:db8::1:3128"}, nil, "like http://[2001:db8::1]:3128"},
		{"a quote", []string{"HTTPS_PROXY=http://alice:hunt'er2@proxy.example:3128"}, nil, "percent-encode them"},
		{"NO_PROXY with a space", []string{"NO_PROXY=a.example, b.example"}, nil, "NO_PROXY holds characters"},
		{"IPv6 server without brackets", nil, []string{"--server", "https://2001:db8::1:9443"}, "like https://[2001:db8::1]:9443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newInstallRoot(t)
			args := append([]string{script, "agent", "--token", token}, tc.args...)
			if tc.args == nil {
				args = append(args, "--server", "https://10.0.0.1:9443")
			}
			cmd := exec.Command("sh", args...)
			cmd.Env = r.env(tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "nothing was installed") {
				t.Errorf("install.sh with %v %v: %v\n%s\nwant an error saying %q and that nothing was installed", tc.env, tc.args, err, out, tc.want)
			}
			if strings.Contains(string(out), "hunter2") || strings.Contains(string(out), "hunt'er2") {
				t.Errorf("the error repeats the password:\n%s", out)
			}
			if left := r.files(t); len(left) != 0 {
				t.Errorf("a refused install left files: %v", left)
			}
		})
	}
}

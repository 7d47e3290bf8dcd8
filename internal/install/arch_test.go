package install

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestInstallScriptArchitecture: install.sh maps what `uname -m` says to the
// agent binary it downloads, and refuses, before anything is fetched or
// written, a machine no agent is built for. A `uname` earlier on PATH plays
// each machine (test-only: the script itself always asks the real uname).
func TestInstallScriptArchitecture(t *testing.T) {
	for _, c := range []struct {
		machine string
		asset   string // muster-agent-linux-<asset>; "" when refused
		refusal string
	}{
		{machine: "x86_64", asset: "amd64"},
		{machine: "amd64", asset: "amd64"},
		{machine: "aarch64", asset: "arm64"},
		{machine: "arm64", asset: "arm64"},
		{machine: "armv7l", asset: "arm"},
		{machine: "armhf", asset: "arm"},
		{machine: "armv8l", asset: "arm"}, // 32-bit userland on a 64-bit ARM kernel
		{machine: "armv6l", refusal: "built for ARMv7 (GOARM=7) and does not run on armv6l"},
		{machine: "riscv64", refusal: "this host is riscv64, which muster-agent is not built for (it is for x86_64, aarch64 and armv7l)"},
		{machine: "i686", refusal: "this host is i686, which muster-agent is not built for"},
	} {
		t.Run(c.machine, func(t *testing.T) {
			shim := t.TempDir()
			uname := "#!/bin/sh\ncase \"$1\" in -m) echo '" + c.machine + "' ;; *) echo Linux ;; esac\n"
			if err := os.WriteFile(filepath.Join(shim, "uname"), []byte(uname), 0o755); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			cmd := exec.Command("sh", "install.sh", "agent")
			cmd.Env = append(os.Environ(), "PATH="+shim+":"+os.Getenv("PATH"),
				"INSTALL_MUSTER_BIN_DIR="+root+"/bin", "INSTALL_MUSTER_SYSTEMD_DIR="+root+"/etc", "INSTALL_MUSTER_DATA_DIR="+root+"/data",
				"INSTALL_MUSTER_INIT=none", "MUSTER_URL=", "MUSTER_TOKEN=")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("install.sh without a server URL succeeded:\n%s", out)
			}
			if c.asset != "" {
				want := "this host is linux/" + c.machine + ": it runs muster-agent-linux-" + c.asset
				if !strings.Contains(string(out), want) {
					t.Errorf("install.sh on %s does not say %q:\n%s", c.machine, want, out)
				}
				// It got as far as the download, which needs a URL.
				if !strings.Contains(string(out), "no server URL") {
					t.Errorf("install.sh on %s stopped before the download:\n%s", c.machine, out)
				}
			} else if !strings.Contains(string(out), c.refusal) || !strings.Contains(string(out), "nothing was installed") {
				t.Errorf("install.sh on %s: want an error saying %q and that nothing was installed:\n%s", c.machine, c.refusal, out)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("install.sh on %s left %d entries in its root", c.machine, len(entries))
			}
		})
	}
}

// TestAgentAssetsEveryPlatform: the server publishes its own agent and every
// muster-agent-<os>-<arch> of --agent-assets-dir, each with its SHA-256,
// lists them, and answers a missing architecture with the ones it has.
func TestAgentAssetsEveryPlatform(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(t.TempDir(), "muster-agent")
	files := map[string]string{
		own: "agent for " + runtime.GOARCH,
		filepath.Join(dir, "muster-agent-linux-arm64"): "agent for arm64",
		filepath.Join(dir, "muster-agent-linux-arm"):   "agent for armv7",
		// Not agents for install.sh: never listed nor served as one.
		filepath.Join(dir, "muster-agent-v1.2-linux-arm64"): "a versioned agent",
		filepath.Join(dir, "README"):                        "notes",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "muster-agent-linux-riscv64"), 0o755); err != nil { // a directory is no binary
		t.Fatal(err)
	}
	h := New(Config{AgentBinary: own, AgentAssetsDir: dir})
	srv := httptest.NewServer(http.HandlerFunc(h.asset))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sumOf := func(b string) string { s := sha256.Sum256([]byte(b)); return hex.EncodeToString(s[:]) }

	for _, c := range []struct{ asset, content string }{
		{"muster-agent-" + runtime.GOOS + "-" + runtime.GOARCH, "agent for " + runtime.GOARCH},
		{"muster-agent-linux-arm64", "agent for arm64"},
		{"muster-agent-linux-arm", "agent for armv7"},
	} {
		if runtime.GOARCH == "arm64" && c.asset == "muster-agent-linux-arm64" {
			c.content = "agent for arm64" // --agent-binary wins for the server's own platform
		}
		if code, body := get(AssetsPrefix + c.asset); code != 200 || body != c.content {
			t.Errorf("%s: %d %q, want %q", c.asset, code, body, c.content)
		}
		if code, body := get(AssetsPrefix + c.asset + ".sha256"); code != 200 || body != sumOf(c.content)+"  "+c.asset+"\n" {
			t.Errorf("%s.sha256: %d %q", c.asset, code, body)
		}
	}
	code, body := get(AssetsPrefix + PlatformsAsset)
	want := []string{runtime.GOOS + "/" + runtime.GOARCH, "linux/arm", "linux/arm64"}
	for _, p := range want {
		if !strings.Contains("\n"+body, "\n"+p+"\n") {
			t.Errorf("%s: %d %q does not list %s", PlatformsAsset, code, body, p)
		}
	}
	if strings.Contains(body, "riscv64") || strings.Contains(body, "v1.2") {
		t.Errorf("%s lists what is no agent binary: %q", PlatformsAsset, body)
	}
	code, body = get(AssetsPrefix + "muster-agent-linux-riscv64.sha256")
	if code != 404 || !strings.Contains(body, "no muster-agent for linux/riscv64") || !strings.Contains(body, "linux/arm, linux/arm64") ||
		!strings.Contains(body, "--agent-assets-dir") {
		t.Errorf("a missing architecture: %d %q, want a 404 naming the architectures it has and the flag", code, body)
	}
}

// TestAgentBinaryFromReleaseDir: a server run from a `make release`
// directory (muster-server-linux-<arch> beside muster-agent-linux-<arch>)
// hands out, for its own platform (install.sh, --with-agent, the process
// driver), the agent of that directory.
func TestAgentBinaryFromReleaseDir(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(self) // the test binary's own, temporary, directory
	if _, err := os.Stat(filepath.Join(dir, "muster-agent")); err == nil {
		t.Fatalf("%s already holds a muster-agent: this test needs a directory without one", dir)
	}
	released := filepath.Join(dir, AgentAsset(runtime.GOOS, runtime.GOARCH))
	if err := os.WriteFile(released, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(released) })
	if got := AgentBinary(""); got != released {
		t.Errorf("AgentBinary beside a release's agent = %s, want %s", got, released)
	}
	if got := AgentBinary("/opt/agent"); got != "/opt/agent" {
		t.Errorf("AgentBinary(--agent-binary /opt/agent) = %s", got)
	}
}

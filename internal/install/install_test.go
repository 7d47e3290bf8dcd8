package install

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestVersionedAgentAssets(t *testing.T) {
	dir := t.TempDir()
	platform := runtime.GOOS + "-" + runtime.GOARCH
	bin := filepath.Join(dir, "muster-agent-v1.2-rc1-"+platform)
	if err := os.WriteFile(bin, []byte("agent v1.2-rc1"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := New(Config{AgentBinary: filepath.Join(dir, "none"), AgentBinariesDir: dir})
	// A real server: downloads are paced with write deadlines, which a
	// recorder cannot set.
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

	if code, body := get(VersionedAgentPath("v1.2-rc1", runtime.GOOS, runtime.GOARCH)); code != 200 || body != "agent v1.2-rc1" {
		t.Fatalf("binary: %d %q", code, body)
	}
	code, body := get(VersionedAgentPath("v1.2-rc1", runtime.GOOS, runtime.GOARCH) + ".sha256")
	if code != 200 || !strings.HasPrefix(body, sumOf("agent v1.2-rc1")+"  muster-agent-"+platform) {
		t.Fatalf("sha256: %d %q", code, body)
	}
	// A replaced binary is hashed again.
	if err := os.WriteFile(bin, []byte("agent v1.2-rc1, rebuilt"), 0o755); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(bin, later, later)
	if _, body := get(VersionedAgentPath("v1.2-rc1", runtime.GOOS, runtime.GOARCH) + ".sha256"); !strings.HasPrefix(body, sumOf("agent v1.2-rc1, rebuilt")) {
		t.Fatalf("sha256 after the file changed: %q", body)
	}
	for path, want := range map[string]int{
		VersionedPrefix + "../../etc/passwd":                                    400,
		VersionedPrefix + "..%2f/muster-agent-" + platform:                      400,
		VersionedPrefix + strings.Repeat("v", 65) + "/muster-agent-" + platform: 400,
		VersionedPrefix + "v1/../../x":                                          400,
		VersionedPrefix + "v1/muster-agent-../../x":                             400,
		VersionedAgentPath("v9", runtime.GOOS, runtime.GOARCH):                  404,
	} {
		if code, body := get(path); code != want {
			t.Errorf("%s: %d %q, want %d", path, code, body, want)
		} else if code == 400 && !strings.Contains(body, "ask for /assets/agent/") {
			t.Errorf("%s: message %q does not say what to ask for", path, body)
		}
	}
	if !ValidVersion("v1.2.3+git.abc-dirty") || ValidVersion("..") || ValidVersion(".hidden") || ValidVersion("a/b") {
		t.Error("ValidVersion")
	}
}

package install

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestKubernetesAssets: --kubernetes-assets-dir is served at
// /assets/kubernetes/<version>/<os>-<arch>/<name> with its .sha256, the
// sums the planner pins are the ones served (a replaced file is hashed
// again), and a request out of the layout is refused saying what to ask.
func TestKubernetesAssets(t *testing.T) {
	if !reflect.DeepEqual(KubernetesBinaryNames, api.KubernetesBinaryNames) {
		t.Fatalf("the server serves %v, the API admits %v: one list", KubernetesBinaryNames, api.KubernetesBinaryNames)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "v1.37.2", "linux-amd64")
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(p, "kube-apiserver")
	if err := os.WriteFile(bin, []byte("kube-apiserver v1.37.2"), 0o755); err != nil {
		t.Fatal(err)
	}
	k := NewKubernetesAssets(dir)
	h := New(Config{AgentBinary: filepath.Join(dir, "none"), Kubernetes: k})
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
	path := KubernetesAssetPath("v1.37.2", "linux-amd64", "kube-apiserver")
	if code, body := get(path); code != 200 || body != "kube-apiserver v1.37.2" {
		t.Fatalf("binary: %d %q", code, body)
	}
	if code, body := get(path + ".sha256"); code != 200 || body != sumOf("kube-apiserver v1.37.2")+"  kube-apiserver\n" {
		t.Fatalf("sha256: %d %q", code, body)
	}
	sums, err := k.Binaries("v1.37.2", "linux-amd64")
	if err != nil || !reflect.DeepEqual(sums, map[string]string{"kube-apiserver": sumOf("kube-apiserver v1.37.2")}) {
		t.Fatalf("the sums the planner pins: %v %v", sums, err)
	}
	if err := os.WriteFile(bin, []byte("kube-apiserver v1.37.2, rebuilt"), 0o755); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(bin, later, later)
	if sums, _ := k.Binaries("v1.37.2", "linux-amd64"); sums["kube-apiserver"] != sumOf("kube-apiserver v1.37.2, rebuilt") {
		t.Fatalf("the sum after the file changed: %v", sums)
	}
	if sums, err := k.Binaries("v9.9.9", "linux-amd64"); err != nil || len(sums) != 0 {
		t.Errorf("a version the server does not have: %v %v; want none, no error", sums, err)
	}
	for path, want := range map[string]struct {
		code int
		says string
	}{
		KubernetesPrefix + "../../etc/passwd":                   {400, "ask for /assets/kubernetes/<version>/<os>-<arch>/<name>"},
		KubernetesPrefix + "v1.37.2/linux-amd64/../../x":        {400, ""},
		KubernetesPrefix + "v1.37.2/linux-amd64/sh":             {400, `"sh" is not a Kubernetes binary this server serves`},
		KubernetesPrefix + "v1.37.2/linux_amd64/kube-apiserver": {400, "is not a platform"},
		KubernetesPrefix + "v1.36.0/linux-amd64/kube-apiserver": {404, "this server has no kube-apiserver v1.36.0 for linux-amd64: its operator puts it in --kubernetes-assets-dir as <dir>/v1.36.0/linux-amd64/kube-apiserver (it has versions: v1.37.2)"},
		KubernetesPrefix + "v1.37.2/linux-amd64/etcd.sha256":    {404, "no etcd v1.37.2"},
	} {
		if code, body := get(path); code != want.code || !strings.Contains(body, want.says) {
			t.Errorf("%s: %d %q; want %d saying %q", path, code, body, want.code, want.says)
		}
	}
	// No directory given: nothing is served, and the answer says how.
	h = New(Config{AgentBinary: filepath.Join(dir, "none"), Kubernetes: NewKubernetesAssets("")})
	srv2 := httptest.NewServer(http.HandlerFunc(h.asset))
	defer srv2.Close()
	resp, err := http.Get(srv2.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), "start muster-server with --kubernetes-assets-dir") {
		t.Errorf("no --kubernetes-assets-dir: %d %q", resp.StatusCode, b)
	}
}

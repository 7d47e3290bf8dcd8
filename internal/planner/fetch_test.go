package planner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestFetchBinaries runs the download a plan renders, with real curl
// against a TLS server standing in for muster-server's /assets/kubernetes:
// a binary with its pinned SHA-256 is downloaded (trusting the server's
// CA only) and made executable, and not downloaded again once there; one
// whose content is not what was pinned is refused, deleted, and the
// failure names the binary, the sum expected and the sum got.
func TestFetchBinaries(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("no curl: the plans download with it: %v", err)
	}
	good := []byte("#!/bin/sh\necho the real kube-apiserver\n")
	tampered := []byte("#!/bin/sh\ntouch \"$0.ran\"\n")
	var asked atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if strings.HasSuffix(r.URL.Path, "/tampered/kube-apiserver") {
			_, _ = w.Write(tampered)
			return
		}
		_, _ = w.Write(good)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	sum := sha256.Sum256(good)
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, url string) (binDir, script, out string, err error) {
		binDir = t.TempDir()
		in := renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"}, machine: "w1", address: "10.0.0.9",
			stage: stage{etcdMember: -1, worker: true}, apiServer: "10.0.0.1", pki: k, existing: map[string]string{},
			bin: binSet{dir: binDir, serverURL: srv.URL, serverCA: ca, fetch: []api.KubernetesBinary{{Name: "kubectl", URL: url, Sha256: hex.EncodeToString(sum[:])}}}}
		spec, err := render(in)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Instructions[0].Name != "fetch-binaries" {
			t.Fatalf("the plan's first instruction is %s; want the download, before anything runs", spec.Instructions[0].Name)
		}
		// The plan's files, under a temporary root instead of BaseDir.
		root := t.TempDir()
		for _, f := range spec.Files {
			content := strings.ReplaceAll(f.Content, in.dir(), root)
			p := filepath.Join(root, strings.TrimPrefix(f.Path, in.dir()))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o700); err != nil {
				t.Fatal(err)
			}
			if path.Base(f.Path) == "fetch.sh" {
				script = p
			}
		}
		b, err := exec.Command("/bin/sh", script).CombinedOutput()
		return binDir, script, string(b), err
	}

	t.Run("the pinned binary is downloaded once, trusting the server's CA", func(t *testing.T) {
		asked.Store(0)
		binDir, script, out, err := run(t, srv.URL+"/assets/kubernetes/v1.37.2/linux-amd64/kubectl")
		if err != nil {
			t.Fatalf("the download failed: %v\n%s", err, out)
		}
		fi, err := os.Stat(filepath.Join(binDir, "kubectl"))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("kubectl after the download: %v %v; want it there, executable\n%s", fi, err, out)
		}
		// Run again (the plan applied again): nothing is downloaded.
		again, err := exec.Command("/bin/sh", script).CombinedOutput()
		if err != nil || !strings.Contains(string(again), "kubectl: have it") {
			t.Errorf("the download again: %v\n%s", err, again)
		}
		if n := asked.Load(); n != 1 {
			t.Errorf("%d requests for a binary downloaded once; want 1", n)
		}
	})
	t.Run("a tampered binary is refused and deleted, never run", func(t *testing.T) {
		binDir, _, out, err := run(t, srv.URL+"/tampered/kube-apiserver")
		if err == nil {
			t.Fatalf("the download of a binary whose sum is not the pinned one succeeded:\n%s", out)
		}
		got := sha256.Sum256(tampered)
		for _, want := range []string{"kubectl from " + srv.URL + "/tampered/kube-apiserver refused", "its sha256 is " + hex.EncodeToString(got[:]), "expected " + hex.EncodeToString(sum[:]), "never run"} {
			if !strings.Contains(out, want) {
				t.Errorf("the failure does not say %q:\n%s", want, out)
			}
		}
		entries, _ := os.ReadDir(binDir)
		if len(entries) != 0 {
			t.Errorf("the binary dir holds %v after a refused download; want nothing", entries)
		}
	})
}

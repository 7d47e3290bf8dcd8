package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRestartKeepsData: objects survive a clean stop and a kill -9, and
// resourceVersions keep increasing across restarts.
func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))
		rv1 := resourceVersion(t, s, "cluster", "edge-east")

		s.stop()
		s.start()
		s.mustKubectl("apply", "--server-side", "-f", testdata("manifests", "machine.yaml"))
		rv2 := resourceVersion(t, s, "machine", "node-a")
		if rv2 <= rv1 {
			t.Errorf("resourceVersion went from %d to %d across a restart", rv1, rv2)
		}

		s.kill9()
		s.start()
		for _, obj := range [][2]string{{"cluster", "edge-east"}, {"machine", "node-a"}} {
			if out, err := s.kubectl("get", obj[0], obj[1]); err != nil {
				t.Errorf("%s/%s lost after kill -9: %v\n%s", obj[0], obj[1], err, out)
			}
		}
		s.mustKubectl("patch", "machine", "node-a", "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Registering"}}`)
		if rv3 := resourceVersion(t, s, "machine", "node-a"); rv3 <= rv2 {
			t.Errorf("resourceVersion went from %d to %d across kill -9", rv2, rv3)
		}
	})
}

func resourceVersion(t *testing.T, s *server, kind, name string) int64 {
	t.Helper()
	out := s.mustKubectl("get", kind, name, "-o", "jsonpath={.metadata.resourceVersion}")
	rv, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", out, err)
	}
	return rv
}

// TestAnonymousAccess: only the public endpoints answer without credentials.
func TestAnonymousAccess(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	ca, err := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		code int
	}{
		{"/cacerts", http.StatusOK},
		{"/readyz", http.StatusOK},
		{"/livez", http.StatusOK},
		{"/healthz", http.StatusOK},
		{"/version", http.StatusOK},
		{"/apis", http.StatusUnauthorized},
		{"/apis/muster.io/v1alpha1/machines", http.StatusUnauthorized},
		{"/metrics", http.StatusUnauthorized},
		{"/openapi/v3", http.StatusUnauthorized},
	}
	for _, tc := range cases {
		code, body, err := s.get(tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		if code != tc.code {
			t.Errorf("anonymous GET %s = %d, want %d: %s", tc.path, code, tc.code, body)
		}
		if tc.path == "/cacerts" && string(body) != string(ca) {
			t.Errorf("/cacerts does not serve the CA file byte for byte")
		}
	}
	// The admin reaches /metrics.
	out := s.mustKubectl("get", "--raw", "/metrics")
	if !strings.Contains(out, "apiserver_request_total") {
		t.Errorf("admin /metrics lacks apiserver metrics")
	}
}

// TestDatastoreErrors: a bad datastore is a clear error and an exit, not a panic.
func TestDatastoreErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		endpoint string
		want     string
	}{
		{"malformed DSN", "postgres://%zz", "datastore"},
		{"unknown scheme", "mongodb://127.0.0.1:27017/x", "mongodb"},
		{"unreachable PostgreSQL", "postgres://postgres:secretpw@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "127.0.0.1:1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, "127.0.0.1", tc.endpoint)
			s.launch()
			<-s.exited
			log := s.log.String()
			if s.cmd.ProcessState.ExitCode() == 0 {
				t.Fatalf("muster-server exited 0 with a bad datastore:\n%s", log)
			}
			if strings.Contains(log, "panic:") || strings.Contains(log, "goroutine ") {
				t.Errorf("muster-server panicked:\n%s", log)
			}
			if !strings.Contains(log, tc.want) {
				t.Errorf("error does not mention %q:\n%s", tc.want, log)
			}
			if strings.Contains(log, "secretpw") {
				t.Errorf("the datastore password appears in the log:\n%s", log)
			}
		})
	}

	t.Run("SQLite data dir in use", func(t *testing.T) {
		first := startServer(t, "")
		second := &server{t: t, dataDir: first.dataDir, port: freePort(t)}
		second.launch()
		<-second.exited
		log := second.log.String()
		if second.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(log, "in use") {
			t.Errorf("a second server on the same data dir should refuse clearly:\n%s", log)
		}
		// The first server is unharmed.
		first.mustKubectl("get", "machines")
	})
}

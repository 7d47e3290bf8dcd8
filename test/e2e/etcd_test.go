package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/muster-io/muster/internal/testenv/etcdtest"
)

// etcdTLSArgs are the flags that reach e with its client certificate.
func etcdTLSArgs(e *etcdtest.Etcd) []string {
	return []string{"--datastore-cafile", e.CAFile, "--datastore-certfile", e.CertFile, "--datastore-keyfile", e.KeyFile}
}

// TestEtcdTLS: muster-server on a real etcd 3.4 that requires client
// certificates. It says at startup what is off on etcd; kubectl creates,
// gets and watches; a real agent joins and reaches Running; a second
// server on the same etcd serves the same objects and its watch sees them;
// history says it needs SQL; snapshot works through the etcd API.
func TestEtcdTLS(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	s1 := startServer(t, e.Endpoint, append(etcdTLSArgs(e), "--snapshot-interval", "1s")...)
	for _, want := range []string{"The datastore is an external etcd", "transition history", "etcdVersion=\"3.4", "lacks reliable watch progress requests"} {
		if !strings.Contains(s1.log.String(), want) {
			t.Errorf("the startup log does not say %q:\n%s", want, s1.log.String())
		}
	}
	s2 := newServer(t, "127.0.0.2", e.Endpoint, append(etcdTLSArgs(e), "--token", serverToken(t, s1))...)
	s2.start()

	// A watch through server 2 of what is written through server 1.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	watch := exec.CommandContext(ctx, "kubectl", "--server", s2.url(), "get", "machines", "-w", "--output-watch-events",
		"-o", "jsonpath={.type} {.object.metadata.name} {.object.status.phase}{\"\\n\"}")
	watch.Env = append(os.Environ(), "KUBECONFIG="+s1.kubeconfig())
	watched := &syncBuffer{}
	watch.Stdout, watch.Stderr = watched, watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()

	s1.mustKubectl("apply", "--server-side", "-f", testdata("manifests", "machine.yaml"))
	if out := s1.mustKubectl("--server", s2.url(), "get", "machine", "node-a", "-o", "jsonpath={.status.phase}"); out != "Pending" {
		t.Errorf("node-a through server 2: %q, want Pending", out)
	}

	a := startAgent(t, s1, t.TempDir(), "--token", newToken(t, s1), "--node-name", "etcd-1")
	a.waitOutput("running as machine etcd-1", 60*time.Second)
	waitPhase(t, s1, "etcd-1", "Running", 60*time.Second)
	waitPhase(t, s2, "etcd-1", "Running", 30*time.Second)
	waitFor(t, 30*time.Second, "server 2's watch to see node-a added and etcd-1 Running", func() bool {
		w := watched.String()
		return strings.Contains(w, "ADDED node-a") && strings.Contains(w, "etcd-1 Running")
	})

	// The objects are in etcd itself, under the apiserver's prefix.
	c := e.Client(t)
	resp, err := c.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, "/machines/etcd-1") }) {
		t.Fatalf("machine etcd-1 is not stored in etcd; its keys: %q", keys)
	}

	// history needs SQL, and says so rather than failing obscurely.
	out, err := historyCLI(s1, "machine/etcd-1")
	if err == nil || !strings.Contains(out, "needs a SQL datastore") || !strings.Contains(out, "status.transitions") {
		t.Errorf("history on etcd: %v\n%s", err, out)
	}

	// A snapshot reads etcd through its API, with the same TLS flags.
	file := filepath.Join(t.TempDir(), "etcd.snapshot")
	out, err = datastoreCLI(s1, []string{"MUSTER_DATASTORE_ENDPOINT=" + e.Endpoint}, append([]string{"datastore", "snapshot", file}, etcdTLSArgs(e)...)...)
	if err != nil || !strings.Contains(out, "from etcd") {
		t.Fatalf("snapshot of etcd: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))

	// Scheduled snapshots reach etcd with the server's TLS files too.
	waitFor(t, 30*time.Second, "a scheduled snapshot of etcd", func() bool {
		m, _ := filepath.Glob(filepath.Join(s1.dataDir, "snapshots", "muster-*.snapshot"))
		return len(m) > 0
	})
}

// TestEtcdRefusals: a client certificate etcd refuses, and a key file other
// users can read, each stop the server at once with a message naming the
// flag to fix.
func TestEtcdRefusals(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	foreignCert, foreignKey := e.ForeignClientCert(t)
	openKey := filepath.Join(t.TempDir(), "client.key")
	key, err := os.ReadFile(e.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(openKey, key, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"refused client certificate", []string{"--datastore-cafile", e.CAFile, "--datastore-certfile", foreignCert, "--datastore-keyfile", foreignKey},
			[]string{"refused this server's client certificate", "--datastore-certfile"}},
		{"key readable by others", []string{"--datastore-cafile", e.CAFile, "--datastore-certfile", e.CertFile, "--datastore-keyfile", openKey},
			[]string{"--datastore-keyfile", "mode 0644", "chmod 600"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, "127.0.0.1", e.Endpoint, tc.args...)
			s.launch()
			select {
			case <-s.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("muster-server still running with %s:\n%s", tc.name, s.log.String())
			}
			if s.cmd.ProcessState.ExitCode() == 0 {
				t.Errorf("muster-server exited 0")
			}
			for _, w := range tc.want {
				if !strings.Contains(s.log.String(), w) {
					t.Errorf("muster-server's output does not say %q:\n%s", w, s.log.String())
				}
			}
			if strings.Contains(s.log.String(), "PRIVATE KEY") {
				t.Errorf("the output holds key material:\n%s", s.log.String())
			}
		})
	}
}

// TestEtcdSnapshotRestore: a snapshot of a server's etcd, taken while it
// runs, restored into another, empty etcd: a server there (same token,
// same address) serves the same machine, its agent carries on with its
// certificate and applies a new plan, and a second restore is refused.
func TestEtcdSnapshotRestore(t *testing.T) {
	t.Parallel()
	a := etcdtest.Start(t)
	s := startServer(t, a.Endpoint, etcdTLSArgs(a)...)
	agent := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "etcd-move")
	agent.waitOutput("running as machine etcd-move", 60*time.Second)
	waitPhase(t, s, "etcd-move", "Running", 60*time.Second)
	before := readObjects(t, adminClient(t, s))
	tokenFile := writeSecretFile(t, serverToken(t, s))

	file := filepath.Join(t.TempDir(), "etcd.snapshot")
	out, err := datastoreCLI(s, []string{"MUSTER_DATASTORE_ENDPOINT=" + a.Endpoint}, append([]string{"datastore", "snapshot", file}, etcdTLSArgs(a)...)...)
	if err != nil {
		t.Fatalf("snapshot of etcd: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	s.stop()

	b := etcdtest.Start(t)
	r := newServer(t, s.host, b.Endpoint, append(etcdTLSArgs(b), "--token-file", tokenFile)...)
	r.port = s.port // where the agent looks for it
	env := []string{"MUSTER_DATASTORE_ENDPOINT=" + b.Endpoint}
	out, err = datastoreCLI(r, env, append([]string{"datastore", "restore", file}, etcdTLSArgs(b)...)...)
	if err != nil || !strings.Contains(out, "into etcd") {
		t.Fatalf("restore into etcd: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	if out, err := datastoreCLI(r, env, append([]string{"datastore", "restore", file}, etcdTLSArgs(b)...)...); err == nil || !strings.Contains(out, "not empty") {
		t.Errorf("a second restore into the same etcd: %v\n%s", err, out)
	}
	r.start()
	agentsWork(t, r, []string{"etcd-move"})
	sameObjects(t, before, readObjects(t, adminClient(t, r)))
	if n := strings.Count(agent.log.String(), "registering node"); n != 1 {
		t.Errorf("the agent registered %d times, want once:\n%s", n, agent.log.String())
	}
}

// TestEtcdMigrateFromSQLite: a stopped server's SQLite datastore moved into
// an empty etcd with datastore migrate (the target in --to-file, the TLS
// files as flags); the server on etcd serves the same objects and the
// agent carries on with its certificate.
func TestEtcdMigrateFromSQLite(t *testing.T) {
	t.Parallel()
	s, names := fleet(t, 20, 1)
	before := readObjects(t, adminClient(t, s))
	s.stop()

	e := etcdtest.Start(t)
	out, err := datastoreCLI(s, nil, append([]string{"datastore", "migrate", "--to-file", writeSecretFile(t, e.Endpoint)}, etcdTLSArgs(e)...)...)
	if err != nil || !strings.Contains(out, "into etcd") {
		t.Fatalf("migrate into etcd: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	s.endpoint, s.extra = e.Endpoint, etcdTLSArgs(e)
	s.start()
	agentsWork(t, s, names)
	sameObjects(t, before, readObjects(t, adminClient(t, s)))
}

// TestEtcdServerSaysItWaits: a server whose etcd is not there says what it
// waits for every few seconds, then gives up naming the endpoint and the
// flags to check, instead of hanging silently.
func TestEtcdServerSaysItWaits(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t) // for its TLS files; the endpoint below is not it
	endpoint := fmt.Sprintf("https://127.0.0.1:%d", freePort(t))
	s := newServer(t, "127.0.0.1", endpoint, etcdTLSArgs(e)...)
	s.launch()
	waitFor(t, 15*time.Second, "the server to say it still waits for etcd", func() bool {
		return strings.Contains(s.log.String(), "still waiting for the datastore at "+endpoint+" (etcd)")
	})
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("muster-server still running without its etcd:\n%s", s.log.String())
	}
	if log := s.log.String(); !strings.Contains(log, "cannot reach etcd at "+endpoint) || !strings.Contains(log, "--datastore-endpoint") {
		t.Errorf("the server's last words do not name the endpoint and the flag:\n%s", log)
	}
}

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/snapshot"
	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// encryptionKey is a fresh aesgcm key, base64 as the file holds it.
func encryptionKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// encryptionConfig writes the EncryptionConfiguration docs/encryption.md
// shows (mode 0600, outside the data dir), with the named keys in order:
// the first encrypts, all decrypt.
func encryptionConfig(t testing.TB, keys map[string]string, order ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources:\n      - machineplans.muster.io\n      - machineplansets.muster.io\n    providers:\n      - aesgcm:\n          keys:\n")
	for _, n := range order {
		fmt.Fprintf(&b, "            - name: %s\n              secret: %s\n", n, keys[n])
	}
	f := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// storedPlanValues reads, with an operator's SQL client, the current
// stored value of every MachinePlan and MachinePlanSet: the newest row of
// each key in kine's table, unless deleted.
func storedPlanValues(t *testing.T, s *server) map[string][]byte {
	t.Helper()
	rows, err := openDatastoreSQL(t, s).Query(`SELECT k.name, k.value FROM kine k
		JOIN (SELECT name, MAX(id) AS id FROM kine GROUP BY name) newest ON k.id = newest.id
		WHERE k.deleted = 0 AND (k.name LIKE '/registry/muster.io/muster.io/machineplans/%' OR k.name LIKE '/registry/muster.io/muster.io/machineplansets/%')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var name string
		var v []byte
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		out[name] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// allUnder asserts that every plan and plan set is stored encrypted with
// the named aesgcm key (the prefix the apiserver's provider writes).
func allUnder(t *testing.T, s *server, key string, want int) {
	t.Helper()
	values := storedPlanValues(t, s)
	if len(values) != want {
		t.Fatalf("%d plans and plan sets stored, want %d: %v", len(values), want, values)
	}
	prefix := []byte("k8s:enc:aesgcm:v1:" + key + ":")
	for name, v := range values {
		if !bytes.HasPrefix(v, prefix) {
			t.Errorf("%s is stored as %q..., want it encrypted with key %s", name, v[:min(len(v), 40)], key)
		}
	}
}

// TestEncryptionAtRest (issue 30): with --encryption-provider-config, a
// plan's and a plan set's secret content is found neither in the SQLite
// files nor in PostgreSQL's kine table nor in a snapshot, while a Machine
// (not encrypted) is found there in plaintext, so the search would have
// found it; an operator still reads the plan whole through the API, and
// so does a server restored from the snapshot with the same key. A key
// rotation as docs/encryption.md tells it (new key first, old key second,
// restart, rewrite with kubectl get | kubectl replace, remove the old key,
// restart) leaves every plan and plan set under the new key, readable. A
// server given a file without the key that encrypted the data, no file at
// all, or a file others may read refuses to start and says why and what
// to do, and no log holds a key or the secret.
func TestEncryptionAtRest(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		secret := "enc-secret-" + hex.EncodeToString(b)
		control := "enc-control-" + hex.EncodeToString(b)
		keys := map[string]string{"key1": encryptionKey(t), "key2": encryptionKey(t), "other": encryptionKey(t)}
		s := startServer(t, endpoint, "--encryption-provider-config", encryptionConfig(t, keys, "key1"))
		noSecretsInLog := func(t *testing.T) {
			t.Helper()
			log := s.log.String()
			for _, v := range []string{secret, keys["key1"], keys["key2"], keys["other"]} {
				if strings.Contains(log, v) {
					t.Fatalf("the server's log holds a secret or a key:\n%s", log)
				}
			}
		}

		manifest := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Machine
metadata:
  name: enc-1
  annotations:
    note: %[2]s
spec:
  cluster: enc
---
apiVersion: muster.io/v1alpha1
kind: MachinePlan
metadata:
  name: enc-1
spec:
  files:
  - path: /etc/app.env
    content: "DB_PASSWORD=%[1]s\n"
  instructions:
  - name: login
    command: /bin/true
    env: ["DB_PASS=%[1]s"]
---
apiVersion: muster.io/v1alpha1
kind: MachinePlanSet
metadata:
  name: enc-set
spec:
  selector:
    matchLabels:
      enc-test: nobody
  template:
    files:
    - path: /etc/app.env
      content: "DB_PASSWORD=%[1]s\n"
`, secret, control)
		manifestFile := filepath.Join(t.TempDir(), "plans.yaml")
		if err := os.WriteFile(manifestFile, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		// create, not apply: apply would keep a copy in an annotation.
		s.mustKubectl("create", "-f", manifestFile)

		readsWhole := func() {
			t.Helper()
			if got := s.mustKubectl("get", "machineplan", "enc-1", "-o", "jsonpath={.spec.files[0].content}"); !strings.Contains(got, secret) {
				t.Fatalf("the admin reads the plan's file as %q, want the secret in clear", got)
			}
			if got := s.mustKubectl("get", "machineplanset", "enc-set", "-o", "jsonpath={.spec.template.files[0].content}"); !strings.Contains(got, secret) {
				t.Fatalf("the admin reads the plan set's file as %q, want the secret in clear", got)
			}
		}
		readsWhole()
		allUnder(t, s, "key1", 2)

		snap := filepath.Join(t.TempDir(), "muster.snapshot")
		if out, err := datastoreCLI(s, []string{"MUSTER_DATASTORE_ENDPOINT=" + endpoint}, "datastore", "snapshot", snap); err != nil {
			t.Fatalf("datastore snapshot: %v\n%s", err, out)
		}
		// A snapshot holds each value base64-encoded (JSON): a plain grep
		// would not find even a plaintext plan, so search the decoded values.
		_, entries, err := snapshot.Read(snap)
		if err != nil {
			t.Fatal(err)
		}
		var snapBytes []byte
		for _, e := range entries {
			snapBytes = append(append(snapBytes, e.Key...), e.Value...)
		}
		for what, stored := range map[string][]byte{"the datastore": storedBytes(t, s, endpoint), "the snapshot": snapBytes} {
			if !bytes.Contains(stored, []byte(control)) {
				t.Fatalf("%s does not hold the Machine's annotation in plaintext: the search below would prove nothing", what)
			}
			if bytes.Contains(stored, []byte(secret)) {
				t.Errorf("%s holds the plan's secret in plaintext", what)
			}
		}
		noSecretsInLog(t)

		// The snapshot restored into a fresh SQLite data dir serves the
		// plans to a server given the deployment's token and key: each
		// ciphertext is bound to its storage key, which a restore keeps.
		r := newServer(t, "127.0.0.1", "", "--token-file", writeSecretFile(t, serverToken(t, s)),
			"--encryption-provider-config", encryptionConfig(t, keys, "key1"))
		if out, err := datastoreCLI(r, nil, "datastore", "restore", snap); err != nil {
			t.Fatalf("datastore restore: %v\n%s", err, out)
		}
		r.start()
		if got := r.mustKubectl("get", "machineplan", "enc-1", "-o", "jsonpath={.spec.files[0].content}"); !strings.Contains(got, secret) {
			t.Fatalf("the restored server reads the plan's file as %q, want the secret in clear", got)
		}
		r.stop()

		// Rotation: the new key first, the old one still there to read
		// what it wrote; then rewrite every object through the API.
		s.stop()
		s.extra = []string{"--encryption-provider-config", encryptionConfig(t, keys, "key2", "key1")}
		s.start()
		if !strings.Contains(s.log.String(), "rewrite them to finish a key rotation") {
			t.Errorf("the server does not say that objects are left under the old key:\n%s", s.log.String())
		}
		// Nothing has rewritten them yet: the rewrite below is what moves them.
		allUnder(t, s, "key1", 2)
		list := s.mustKubectl("get", "machineplans,machineplansets", "-o", "json")
		listFile := filepath.Join(t.TempDir(), "all.json")
		if err := os.WriteFile(listFile, []byte(list), 0o600); err != nil {
			t.Fatal(err)
		}
		s.mustKubectl("replace", "-f", listFile)
		allUnder(t, s, "key2", 2)

		// The old key removed: everything still reads.
		s.stop()
		s.extra = []string{"--encryption-provider-config", encryptionConfig(t, keys, "key2")}
		s.start()
		readsWhole()
		allUnder(t, s, "key2", 2)
		if stored := storedBytes(t, s, endpoint); bytes.Contains(stored, []byte(secret)) {
			t.Errorf("after the rotation the datastore holds the plan's secret in plaintext")
		}
		noSecretsInLog(t)
		s.stop()

		loose := encryptionConfig(t, keys, "key2")
		if err := os.Chmod(loose, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name  string
			extra []string
			want  []string
		}{
			{"without the key", []string{"--encryption-provider-config", encryptionConfig(t, keys, "other")},
				[]string{"machineplans.muster.io/enc-1", "aesgcm key named key2", "cannot decrypt", "does not start", "put that key back"}},
			{"without the file", nil,
				[]string{"aesgcm key named key2", "started without --encryption-provider-config", "does not start"}},
			{"a file others may read", []string{"--encryption-provider-config", loose},
				[]string{"is mode 0644", "chmod 600"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.extra = tc.extra
				s.launch()
				select {
				case <-s.exited:
				case <-time.After(90 * time.Second):
					s.stop() // so that the next case starts on a data dir no server holds
					t.Fatalf("muster-server did not refuse to start:\n%s", s.log.String())
				}
				if s.cmd.ProcessState.ExitCode() == 0 {
					t.Errorf("muster-server exited 0")
				}
				for _, w := range tc.want {
					if !strings.Contains(s.log.String(), w) {
						t.Errorf("the server's output does not say %q:\n%s", w, s.log.String())
					}
				}
				noSecretsInLog(t)
			})
		}
	})
}

// BenchmarkEncryptionPlanWrites: what --encryption-provider-config costs
// the writes it encrypts. Two SQLite servers in the same run, one plain and
// one with an aesgcm key; rounds alternate between them, so that the load
// of a shared machine falls on both alike. A round creates 300 MachinePlans
// carrying a 4 KiB file through client-go, 16 at once, updates each once and
// deletes them. Reported per server: writes/s and the server's CPU time per
// 1,000 writes (less sensitive than wall time to other processes).
func BenchmarkEncryptionPlanWrites(b *testing.B) {
	const perRound, workers = 300, 16
	keys := map[string]string{"bench": encryptionKey(b)}
	names := []string{"plain", "aesgcm"}
	servers := map[string]*server{
		"plain":  startServer(b, ""),
		"aesgcm": startServer(b, "", "--encryption-provider-config", encryptionConfig(b, keys, "bench")),
	}
	content := strings.Repeat("SECRET=0123456789abcdef\n", 4096/24)
	type tally struct {
		writes int
		wall   time.Duration
		cpu    float64
	}
	totals := map[string]*tally{"plain": {}, "aesgcm": {}}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		for round := 0; round < 3; round++ {
			for _, name := range names {
				s := servers[name]
				plans := adminClient(b, s).MusterV1alpha1().MachinePlans()
				cpu0, t0 := cpuSeconds(s.cmd.Process.Pid), time.Now()
				work := make(chan int)
				errs := make(chan error, workers)
				var wg sync.WaitGroup
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := range work {
							p := &v1alpha1.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d-%d-%d", i, round, k)},
								Spec: v1alpha1.MachinePlanSpec{Files: []v1alpha1.PlanFile{{Path: "/etc/app.env", Content: content}}}}
							p, err := plans.Create(ctx, p, metav1.CreateOptions{})
							if err == nil {
								p.Spec.Files[0].Content += "# updated\n"
								_, err = plans.Update(ctx, p, metav1.UpdateOptions{})
							}
							if err == nil {
								err = plans.Delete(ctx, p.Name, metav1.DeleteOptions{})
							}
							if err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				for k := 0; k < perRound; k++ {
					work <- k
				}
				close(work)
				wg.Wait()
				close(errs)
				if err := <-errs; err != nil {
					b.Fatalf("%s: %v", name, err)
				}
				t := totals[name]
				t.writes += 3 * perRound
				t.wall += time.Since(t0)
				t.cpu += cpuSeconds(s.cmd.Process.Pid) - cpu0
			}
		}
	}
	for _, name := range names {
		t := totals[name]
		b.ReportMetric(float64(t.writes)/t.wall.Seconds(), name+"-writes/s")
		b.ReportMetric(t.cpu*1000/float64(t.writes)*1000, name+"-server-CPU-ms/1000-writes")
	}
}

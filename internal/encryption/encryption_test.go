package encryption

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/muster-io/muster/internal/store"
)

// key is a fresh 32-byte secret, base64 as the file holds it.
func key(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// file writes an EncryptionConfiguration for resources with the given
// providers block (already indented) and returns its path.
func file(t *testing.T, mode os.FileMode, resources, providers string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "encryption.yaml")
	body := fmt.Sprintf("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [%s]\n    providers:\n%s", resources, providers)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func aesgcm(names map[string]string, order ...string) string {
	var b strings.Builder
	b.WriteString("      - aesgcm:\n          keys:\n")
	for _, n := range order {
		fmt.Fprintf(&b, "            - name: %s\n              secret: %s\n", n, names[n])
	}
	return b.String()
}

func TestLoadRefuses(t *testing.T) {
	k := key(t)
	plans := "machineplans.muster.io, machineplansets.muster.io"
	cases := []struct {
		name      string
		mode      os.FileMode
		resources string
		providers string
		want      string
	}{
		{"readable by others", 0o644, plans, aesgcm(map[string]string{"k1": k}, "k1"), "is mode 0644"},
		{"readable by the group", 0o640, plans, aesgcm(map[string]string{"k1": k}, "k1"), "chmod 600"},
		{"a wildcard over the history's kinds", 0o600, "'*.muster.io'", aesgcm(map[string]string{"k1": k}, "k1"), "encrypts clusterregistrationtokens.muster.io (named, or through a wildcard)"},
		{"everything", 0o600, "'*.*'", aesgcm(map[string]string{"k1": k}, "k1"), "read as stored"},
		{"no secret-bearing kind", 0o600, "secrets", aesgcm(map[string]string{"k1": k}, "k1"), "encrypts neither machineplans.muster.io, machineplansets.muster.io"},
		{"a key of the wrong length", 0o600, plans, "      - aesgcm:\n          keys:\n            - name: k1\n              secret: dGVuYnl0ZXMhIQ==\n", "EncryptionConfiguration"},
		{"a KMS provider", 0o600, plans, "      - kms:\n          apiVersion: v2\n          name: plugin\n          endpoint: unix:///nonexistent/kms.sock\n", "names a KMS provider"},
		{"not YAML of the kind", 0o600, plans, "      - nonsense: {}\n", "EncryptionConfiguration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := file(t, tc.mode, tc.resources, tc.providers)
			_, err := Load(context.Background(), p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tc.want)
			}
			// Never a key's secret in a message that ends in a log.
			for _, secret := range []string{k, "dGVuYnl0ZXMhIQ==", "tenbytes!!"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error holds a key's secret: %v", err)
				}
			}
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	p := file(t, 0o600, "machineplans.muster.io, machineplansets.muster.io, clusters.muster.io", aesgcm(map[string]string{"k1": key(t)}, "k1")+"      - identity: {}\n")
	c, err := Load(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	for gr, want := range map[schema.GroupResource]bool{
		{Group: Group, Resource: "machineplans"}:    true,
		{Group: Group, Resource: "machineplansets"}: true,
		{Group: Group, Resource: "clusters"}:        true,
		{Group: Group, Resource: "machines"}:        false,
	} {
		if got := c.Encrypts(gr); got != want {
			t.Errorf("Encrypts(%s) = %v, want %v", gr, got, want)
		}
	}
}

// A datastore with a plan encrypted under key k1 (kine on SQLite, in this
// process): each configuration a server could be started with either
// reads it or refuses with a message naming the object, the key and the fix.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	ds, err := store.Open(ctx, store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ds.Close() })
	client, err := ds.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })

	k1, k2 := key(t), key(t)
	plans := "machineplans.muster.io, machineplansets.muster.io"
	withK1 := file(t, 0o600, plans, aesgcm(map[string]string{"k1": k1}, "k1"))
	c1, err := Load(ctx, withK1)
	if err != nil {
		t.Fatal(err)
	}
	planKey := StoragePrefix + "muster.io/machineplans/m-1"
	plain := []byte(`{"kind":"MachinePlan","spec":{"files":[{"path":"/etc/x","content":"hunter2"}]}}`)
	sealed, err := c1.transformer(schema.GroupResource{Group: Group, Resource: "machineplans"}).
		TransformToStorage(ctx, plain, value.DefaultContext(planKey))
	if err != nil {
		t.Fatal(err)
	}
	put(t, client, planKey, sealed)
	// A kind the file does not name stays plaintext, and is read as such.
	put(t, client, StoragePrefix+"muster.io/machines/m-1", []byte(`{"kind":"Machine"}`))

	cases := []struct {
		name      string
		file      string // "" for no flag
		wantErr   []string
		wantStale int
	}{
		{name: "the key that wrote it", file: withK1},
		{name: "a new first key, the old one second", file: file(t, 0o600, plans, aesgcm(map[string]string{"k1": k1, "k2": k2}, "k2", "k1")), wantStale: 1},
		{name: "the old key gone", file: file(t, 0o600, plans, aesgcm(map[string]string{"k2": k2}, "k2")),
			wantErr: []string{"machineplans.muster.io/m-1", "aesgcm key named k1", "cannot decrypt", "does not start", "put that key back"}},
		{name: "same name, other secret", file: file(t, 0o600, plans, aesgcm(map[string]string{"k1": k2}, "k1")),
			wantErr: []string{"aesgcm key named k1", "its secret differs"}},
		{name: "no file", wantErr: []string{"aesgcm key named k1", "started without --encryption-provider-config"}},
		{name: "the kind no longer listed", file: file(t, 0o600, "machineplansets.muster.io", aesgcm(map[string]string{"k1": k1}, "k1")),
			wantErr: []string{"no longer lists machineplans.muster.io"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c *Config
			if tc.file != "" {
				if c, err = Load(ctx, tc.file); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Check(ctx, client, c)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Check = %v, want none", err)
				}
				if r.Stale != tc.wantStale {
					t.Errorf("Stale = %d, want %d", r.Stale, tc.wantStale)
				}
				return
			}
			if err == nil {
				t.Fatal("Check = nil, want a refusal")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %v\nwant it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), k1) || strings.Contains(err.Error(), k2) {
				t.Errorf("the message holds a secret: %v", err)
			}
		})
	}

	// Plaintext from before encryption was turned on: read only while the
	// file keeps identity as a last provider.
	put(t, client, StoragePrefix+"muster.io/machineplansets/s-1", []byte(`{"kind":"MachinePlanSet"}`))
	_, err = Check(ctx, client, c1)
	if err == nil || !strings.Contains(err.Error(), "machineplansets.muster.io/s-1 in the datastore is stored in plaintext") || !strings.Contains(err.Error(), "identity") {
		t.Fatalf("Check = %v, want a refusal naming the plaintext object and identity", err)
	}
	withIdentity, err := Load(ctx, file(t, 0o600, plans, aesgcm(map[string]string{"k1": k1}, "k1")+"      - identity: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := Check(ctx, client, withIdentity); err != nil || r.Stale != 1 || r.StaleByResource["machineplansets.muster.io"] != 1 {
		t.Fatalf("Check with identity last = %+v, %v; want the plaintext set read and counted stale", r, err)
	}
}

// put creates key as kine allows: create-if-absent.
func put(t *testing.T, c *clientv3.Client, key string, v []byte) {
	t.Helper()
	resp, err := c.Txn(context.Background()).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(v))).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("writing %s: %v (succeeded %v)", key, err, resp != nil && resp.Succeeded)
	}
}

func TestKeyOf(t *testing.T) {
	for _, tc := range []struct {
		in             string
		provider, name string
		ok             bool
	}{
		{"k8s:enc:aesgcm:v1:key1:\x00\x01", "aesgcm", "key1", true},
		{"k8s:enc:secretbox:v1:k-2:abc", "secretbox", "k-2", true},
		{`{"kind":"MachinePlan"}`, "", "", false},
	} {
		p, n, ok := keyOf([]byte(tc.in))
		if p != tc.provider || n != tc.name || ok != tc.ok {
			t.Errorf("keyOf(%q) = %q %q %v", tc.in, p, n, ok)
		}
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		gr   schema.GroupResource
		name string
		ok   bool
	}{
		{StoragePrefix + "muster.io/machineplans/web-1", schema.GroupResource{Group: Group, Resource: "machineplans"}, "web-1", true},
		{StoragePrefix + "events/default/web-1.18ebc8", schema.GroupResource{Resource: "events"}, "default/web-1.18ebc8", true},
		{"/registry/health", schema.GroupResource{}, "", false},
		{StoragePrefix + "muster.io/machineplans", schema.GroupResource{}, "", false},
	} {
		gr, name, ok := parseKey(tc.key)
		if gr != tc.gr || name != tc.name || ok != tc.ok {
			t.Errorf("parseKey(%q) = %v %q %v, want %v %q %v", tc.key, gr, name, ok, tc.gr, tc.name, tc.ok)
		}
	}
}

package server

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/pki"
)

// The reloader takes a CA rotation only from a record the server token
// opens: a record sealed with another token, tampered with, or written in
// the clear (what someone able to write the datastore key without the
// token could put there) leaves the running server's CA, its data dir and
// what it serves untouched. A rotation sealed with the token is taken, and
// so is its retirement; the same record again changes nothing.
func TestCAReloaderTakesOnlyWhatTheTokenOpens(t *testing.T) {
	dir := t.TempDir()
	// The data dir must be private, as a server's is.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: dir, BindAddress: "127.0.0.1", AdvertiseAddress: "127.0.0.1", HTTPSPort: 6443}
	start, err := ensureDataDir(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	var applied []*bootstrap.State
	r := &caReloader{token: start.Token, dataDir: cfg.DataDir,
		ensure: func() (*bootstrap.State, error) { return ensureDataDir(cfg, start.Token) },
		apply:  func(s *bootstrap.State) error { applied = append(applied, s); return nil }}
	r.current.Store(start)

	oldKey, err := start.CA.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	next, err := pki.NewCA("muster-ca@next")
	if err != nil {
		t.Fatal(err)
	}
	nextKey, err := next.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	rotated := &bootstrap.SharedCA{CertPEM: next.CertPEM, KeyPEM: nextKey, Retiring: &bootstrap.RetiringCA{CertPEM: start.CA.CertPEM, KeyPEM: oldKey}}
	seal := func(token string, shared *bootstrap.SharedCA) []byte {
		t.Helper()
		blob, err := bootstrap.SealShared(token, shared)
		if err != nil {
			t.Fatal(err)
		}
		return blob
	}
	tampered := seal(start.Token, rotated)
	var s map[string]any
	if err := json.Unmarshal(tampered, &s); err != nil {
		t.Fatal(err)
	}
	data := []byte(s["data"].(string))
	data[10] ^= 1
	s["data"] = string(data)
	tampered, _ = json.Marshal(s)
	clear, _ := json.Marshal(rotated)

	for _, tc := range []struct {
		name string
		blob []byte
	}{
		{"sealed with another token", seal(strings.Repeat("f", 64), rotated)},
		{"tampered with", tampered},
		{"in the clear", clear},
		{"unchanged", seal(start.Token, &bootstrap.SharedCA{CertPEM: start.CA.CertPEM, KeyPEM: oldKey})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.reload(tc.blob)
			if len(applied) != 0 {
				t.Fatalf("record %q: taken, want it ignored", tc.name)
			}
			if b, _ := os.ReadFile(start.Files.CACert); !bytes.Equal(b, start.CA.CertPEM) {
				t.Fatalf("record %q changed the data dir's CA", tc.name)
			}
			if b, _ := os.ReadFile(start.Files.CABundle); !bytes.Equal(b, start.BundlePEM) {
				t.Fatalf("record %q changed the CA bundle", tc.name)
			}
		})
	}

	r.reload(seal(start.Token, rotated))
	if len(applied) != 1 || !bytes.Equal(applied[0].CA.CertPEM, next.CertPEM) || applied[0].Retiring == nil ||
		!bytes.Contains(applied[0].BundlePEM, start.CA.CertPEM) || !bytes.Contains(applied[0].BundlePEM, next.CertPEM) {
		t.Fatalf("a rotation sealed with the token was not taken whole: %d applied", len(applied))
	}
	r.reload(seal(start.Token, rotated))
	if len(applied) != 1 {
		t.Fatal("the same rotation, read again, was applied again")
	}
	r.reload(seal(start.Token, &bootstrap.SharedCA{CertPEM: next.CertPEM, KeyPEM: nextKey}))
	if len(applied) != 2 || applied[1].Retiring != nil || !bytes.Equal(applied[1].BundlePEM, next.CertPEM) {
		t.Fatal("the retirement sealed with the token was not taken: the bundle must be the new CA alone")
	}
}

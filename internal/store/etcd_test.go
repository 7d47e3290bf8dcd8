package store

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/etcdtest"
)

// TestEtcdTLS opens a real etcd that requires client certificates: with
// the right files it answers; a certificate etcd refuses, a key others can
// read and TLS files on a SQL backend are each refused, naming what to fix.
func TestEtcdTLS(t *testing.T) {
	e := etcdtest.Start(t)
	good := TLSFiles{CAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ds, err := Open(ctx, Config{Endpoint: e.Endpoint, TLS: good})
	if err != nil {
		t.Fatalf("open etcd with its client certificate: %v", err)
	}
	defer ds.Close()
	if ds.Backend() != "etcd" || ds.SQL() != nil {
		t.Fatalf("backend %q, SQL %v: want etcd without SQL", ds.Backend(), ds.SQL())
	}
	if !strings.HasPrefix(ds.EtcdVersion(), "3.") {
		t.Fatalf("etcd version %q not read", ds.EtcdVersion())
	}
	if ds.CompactionInterval() == 0 {
		t.Fatal("the apiserver's compactor is off on etcd, where nothing else compacts")
	}
	c, err := ds.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "/registry/etcdtest", "x"); err != nil {
		t.Fatalf("put through the datastore's client: %v", err)
	}
	if tr := ds.Transport(); tr.CertFile != e.CertFile || tr.KeyFile != e.KeyFile || tr.TrustedCAFile != e.CAFile {
		t.Fatalf("the apiserver's transport lacks the TLS files: %+v", tr)
	}

	foreignCert, foreignKey := e.ForeignClientCert(t)
	cases := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"refused client certificate", Config{Endpoint: e.Endpoint, TLS: TLSFiles{CAFile: e.CAFile, CertFile: foreignCert, KeyFile: foreignKey}},
			[]string{"refused this server's client certificate", "--datastore-certfile"}},
		{"no client certificate", Config{Endpoint: e.Endpoint, TLS: TLSFiles{CAFile: e.CAFile}},
			[]string{"--datastore-certfile"}},
		{"serving certificate not trusted", Config{Endpoint: e.Endpoint, TLS: TLSFiles{CertFile: e.CertFile, KeyFile: e.KeyFile}},
			[]string{"--datastore-cafile"}},
		{"cert without key", Config{Endpoint: e.Endpoint, TLS: TLSFiles{CAFile: e.CAFile, CertFile: e.CertFile}},
			[]string{"--datastore-certfile and --datastore-keyfile go together"}},
		{"TLS files on SQLite", Config{DataDir: t.TempDir(), TLS: good},
			[]string{"for an external etcd", "remove them"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			octx, ocancel := context.WithTimeout(ctx, 40*time.Second)
			defer ocancel()
			ds, err := Open(octx, tc.cfg)
			if err == nil {
				ds.Close()
				t.Fatal("opened; want refused")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	t.Run("key readable by others", func(t *testing.T) {
		if err := os.Chmod(e.KeyFile, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(e.KeyFile, 0o600)
		_, err := Open(ctx, Config{Endpoint: e.Endpoint, TLS: good})
		if err == nil || !strings.Contains(err.Error(), "mode 0644") || !strings.Contains(err.Error(), "chmod 600 "+e.KeyFile) {
			t.Fatalf("got %v; want a refusal naming the mode and chmod 600", err)
		}
	})
}

func TestEtcdVersionNote(t *testing.T) {
	for v, wantNote := range map[string]bool{"3.4.23": true, "3.4.31": false, "3.5.12": true, "3.5.13": false, "3.6.0": false, "garbage": false} {
		if got := EtcdVersionNote(v) != ""; got != wantNote {
			t.Errorf("EtcdVersionNote(%q) says something: %v, want %v", v, got, wantNote)
		}
	}
}

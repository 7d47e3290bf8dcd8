package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/muster-io/muster/internal/testenv/pgtest"
)

func TestBadEndpoints(t *testing.T) {
	cases := []struct {
		name, endpoint, want string
	}{
		{"not a URL", "postgres://user:pw@%zz", "not a URL"},
		{"unknown scheme", "mysql://root:pw@127.0.0.1:3306/x", `scheme "mysql" is not supported`},
		{"sqlite scheme", "sqlite:///tmp/x.db", "leave it empty"},
		{"bad PostgreSQL DSN", "postgres://u:pw@127.0.0.1:5432/db?sslmode=bogus", "not a valid PostgreSQL DSN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(context.Background(), Config{DataDir: t.TempDir(), Endpoint: tc.endpoint})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%q) = %v, want an error containing %q", tc.endpoint, err, tc.want)
			}
			if strings.Contains(err.Error(), "pw@") {
				t.Errorf("the error leaks the password: %v", err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ msg, dsn string }{
		{"dial postgres://me:s3cret@h:5432/db failed", "postgres://me:s3cret@h:5432/db"},
		{`parse "postgres://me:s3cret@%zz"`, "postgres://me:s3cret@%zz"},
	} {
		if got := redact(tc.msg, tc.dsn); strings.Contains(got, "s3cret") {
			t.Errorf("redact(%q) = %q", tc.msg, got)
		}
	}
}

// Data written through kine survives a close and reopen on both backends,
// the socket is private, and revisions keep increasing.
func TestReopenKeepsData(t *testing.T) {
	for _, b := range []struct {
		name     string
		endpoint func(t *testing.T) string
	}{
		{"sqlite", func(*testing.T) string { return "" }},
		{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			dir, endpoint := t.TempDir(), b.endpoint(t)
			ctx := context.Background()
			put := func(key, value string) int64 {
				ds, err := Open(ctx, Config{DataDir: dir, Endpoint: endpoint})
				if err != nil {
					t.Fatal(err)
				}
				defer ds.Close()
				fi, err := os.Stat(filepath.Join(dir, "kine.sock"))
				if err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("kine socket mode = %v, %v; want 0600", fi.Mode().Perm(), err)
				}
				c, err := clientv3.New(clientv3.Config{Endpoints: ds.Transport().ServerList, DialTimeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if value != "" {
					// The apiserver's create: a txn that puts only if absent.
					resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, value)).Commit()
					if err != nil || !resp.Succeeded {
						t.Fatalf("create %s: %v %v", key, resp, err)
					}
				}
				got, err := c.Get(ctx, "/registry/a")
				if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "one" {
					t.Fatalf("after reopen /registry/a = %v, %v", got, err)
				}
				return got.Header.Revision
			}
			r1 := put("/registry/a", "one")
			r2 := put("/registry/b", "two")
			r3 := put("", "")
			if !(r1 < r2 && r2 <= r3) {
				t.Errorf("revisions %d, %d, %d do not increase across reopen", r1, r2, r3)
			}
		})
	}
}

// Package pgtest gives tests a real PostgreSQL: a fresh database per test on
// a server that MUSTER_TEST_POSTGRES_DSN names, or else on one this package
// starts once per test binary with hack/postgres.sh. When PostgreSQL cannot
// be had, tests fail under CI (a skipped backend must never pass as tested)
// and skip elsewhere with the reason.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	once      sync.Once
	serverDSN string
	startErr  error
	ownedDir  string
)

// Main wraps a test binary's run: it stops the PostgreSQL server it may have
// started once run returns. Use from TestMain: os.Exit(pgtest.Main(m.Run)).
func Main(run func() int) int {
	code := run()
	if ownedDir != "" {
		_ = exec.Command(script(), "stop", ownedDir).Run()
		_ = os.RemoveAll(ownedDir)
	}
	return code
}

// DSN returns the DSN of a new, empty database that is dropped after the test.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(start)
	if startErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL is required under CI: %v", startErr)
		}
		t.Skipf("no PostgreSQL for this test (set MUSTER_TEST_POSTGRES_DSN or install PostgreSQL): %v", startErr)
	}
	name := "muster_" + randomHex(6)
	admin, err := pgx.Connect(context.Background(), serverDSN)
	if err != nil {
		t.Fatalf("connecting to PostgreSQL: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, serverDSN)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDatabase(serverDSN, name)
}

// ServerDSN returns the DSN of the server's maintenance database, for tests
// that inspect it (e.g. grep the raw rows for secrets).
func ServerDSN(t testing.TB) string {
	t.Helper()
	once.Do(start)
	if startErr != nil {
		t.Fatalf("no PostgreSQL: %v", startErr)
	}
	return serverDSN
}

func start() {
	if dsn := os.Getenv("MUSTER_TEST_POSTGRES_DSN"); dsn != "" {
		serverDSN = dsn
		return
	}
	dir, err := os.MkdirTemp("", "muster-pgtest")
	if err != nil {
		startErr = err
		return
	}
	out, err := exec.Command(script(), "start", dir).CombinedOutput()
	if err != nil {
		startErr = fmt.Errorf("hack/postgres.sh start: %v: %s", err, strings.TrimSpace(string(out)))
		_ = os.RemoveAll(dir)
		return
	}
	ownedDir = dir
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	serverDSN = lines[len(lines)-1]
}

// script finds hack/postgres.sh by walking up to the module root.
func script() string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "hack", "postgres.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "hack/postgres.sh"
		}
		dir = parent
	}
}

func withDatabase(dsn, db string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + db
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

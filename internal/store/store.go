// Package store opens Muster's datastore: kine running in this process on
// SQLite (the default, a file in the data dir) or PostgreSQL, or an external
// etcd reached directly. The apiserver's etcd3 storage dials what Transport
// returns: for kine, a unix socket in the data dir with mode 0600.
//
// Compaction: kine compacts its own table (CompactInterval below) and the
// apiserver's compactor is off (APIServerCompactionInterval is zero). Kine's
// is the one that deletes superseded rows from SQL, so the database does not
// grow without bound; running both would only add write traffic.
package store

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/muster-io/muster/internal/datadir"

	"github.com/jackc/pgx/v5"
	"github.com/k3s-io/kine/pkg/drivers/sqlite"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/klog/v2"
)

const (
	// CompactInterval is how often kine deletes superseded revisions.
	CompactInterval = 5 * time.Minute
	// APIServerCompactionInterval turns the apiserver's compactor off: kine compacts.
	APIServerCompactionInterval = time.Duration(0)
	// EtcdCompactionInterval is the apiserver's own default, for a real etcd.
	EtcdCompactionInterval = 5 * time.Minute
	// connectTimeout bounds how long Open waits for PostgreSQL before it gives up.
	connectTimeout = 20 * time.Second
	// waitingSayEvery is how often a server still dialling its datastore
	// says so.
	waitingSayEvery = 5 * time.Second
)

// Config selects and tunes the datastore.
type Config struct {
	// DataDir holds the SQLite database (db/state.db) and kine's socket (kine.sock).
	DataDir string
	// SocketDir, if set, holds kine's socket instead of DataDir: a command
	// that opens a datastore a server also uses must not take its socket.
	SocketDir string
	// Endpoint is --datastore-endpoint: "" for SQLite, postgres:// for
	// PostgreSQL, http(s):// for an external etcd.
	Endpoint string
	// PollInterval is how often kine polls the database for changes made by
	// other servers; local writes wake watchers at once. Zero means
	// DefaultPollInterval for the backend.
	PollInterval time.Duration
	// TLS is the client certificate and CA an external etcd is reached
	// with; only for an etcd endpoint.
	TLS TLSFiles
	// Quiet keeps kine's informational lines out of the log: a command
	// (datastore snapshot, restore, migrate) that runs kine for a moment
	// prints what it did, not how kine configured its pool. Warnings and
	// errors still come through.
	Quiet bool
}

// Datastore is an open datastore.
type Datastore struct {
	backend   string
	endpoints []string
	// tlsFiles and tls reach an external etcd; empty for kine, whose
	// socket is local.
	tlsFiles TLSFiles
	tls      *tls.Config
	// etcdVersion is what an external etcd reports, for the startup log.
	etcdVersion string
	cancel      context.CancelFunc
	// sql is the database behind kine, migrated to this binary's schema;
	// nil on etcd.
	sql *sql.DB
}

// Open starts the datastore and returns once it answers requests.
func Open(ctx context.Context, cfg Config) (*Datastore, error) {
	kind, err := backendOf(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if kind == "etcd" {
		return openEtcd(ctx, cfg)
	}
	if !cfg.TLS.empty() {
		return nil, fmt.Errorf("--datastore-cafile, --datastore-certfile and --datastore-keyfile are for an external etcd (an https:// --datastore-endpoint); the %s datastore does not use them: remove them", kind)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create data dir %s: %w; choose a writable --data-dir", cfg.DataDir, err)
	}

	routeKineLogs(cfg.Quiet)
	layout, err := datadir.New(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ds := &Datastore{backend: kind}
	kineEndpoint := cfg.Endpoint
	switch kind {
	case "sqlite":
		if err := os.MkdirAll(layout.DBDir, 0o700); err != nil {
			return nil, fmt.Errorf("cannot create %s for the SQLite database: %w; choose a writable --data-dir", layout.DBDir, err)
		}
		kineEndpoint = "sqlite://" + layout.SQLite + "?" + sqlite.DefaultParams
	case "postgres":
		if err := pingPostgres(ctx, cfg.Endpoint); err != nil {
			return nil, err
		}
		// kine creates its database, table and indexes with statements that
		// fail when two servers run them at the same moment on an empty
		// PostgreSQL; one server at a time does it.
		unlock, err := lockPostgresSetup(ctx, cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}

	poll := cfg.PollInterval
	if poll == 0 {
		poll = DefaultPollInterval(kind)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ds.cancel = cancel
	socketDir := cfg.DataDir
	if cfg.SocketDir != "" {
		socketDir = cfg.SocketDir
	}
	socket := filepath.Join(socketDir, datadir.KineSocketName)
	served, err := serveKine(kctx, kine{dsn: kineEndpoint, socket: socket, poll: poll, grpc: grpcServer(WriteConcurrency(kind))})
	if err != nil {
		ds.Close()
		return nil, fmt.Errorf("starting the %s datastore: %s", kind, redact(err.Error(), cfg.Endpoint))
	}
	ds.endpoints = []string{served}
	if err := ds.waitReady(ctx); err != nil {
		ds.Close()
		return nil, err
	}
	// kine has created the database and its own table; ours come next.
	db, _, err := OpenSQL(cfg.DataDir, cfg.Endpoint)
	if err != nil {
		ds.Close()
		return nil, err
	}
	ds.sql = db
	if _, err := Migrate(ctx, db, kind); err != nil {
		ds.Close()
		return nil, err
	}
	return ds, nil
}

func (d *Datastore) waitReady(ctx context.Context) error {
	client, err := clientv3.New(clientv3.Config{Endpoints: d.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("connecting to kine: %w", err)
	}
	defer client.Close()
	rctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	for {
		if _, err := client.Get(rctx, "/registry/health"); err == nil {
			return nil
		} else if rctx.Err() != nil {
			return fmt.Errorf("the %s datastore did not answer within %s: %w", d.backend, connectTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DefaultPollInterval is how often kine looks for rows other servers
// wrote. One SQLite file has one writer, whose writes wake its watchers
// directly, so a slow poll only guards against missed wake-ups. PostgreSQL
// is shared by every server of an HA deployment: the poll interval is the
// floor of how soon a change made through one server reaches watchers on
// another, and one indexed "id > last" query per interval costs little.
func DefaultPollInterval(backend string) time.Duration {
	if backend == "postgres" {
		return 100 * time.Millisecond
	}
	return time.Second
}

// Client is an etcd client on the datastore, for what muster keeps beside
// the API's objects (the sealed cluster CA). The caller closes it.
func (d *Datastore) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: d.endpoints, DialTimeout: 5 * time.Second, TLS: d.tls})
}

// Transport is what the apiserver's etcd3 storage dials.
func (d *Datastore) Transport() storagebackend.TransportConfig {
	return storagebackend.TransportConfig{
		ServerList:    d.endpoints,
		TrustedCAFile: d.tlsFiles.CAFile,
		CertFile:      d.tlsFiles.CertFile,
		KeyFile:       d.tlsFiles.KeyFile,
	}
}

// CompactionInterval is how often the apiserver compacts the datastore.
// Kine compacts its own table, so there it is off; a real etcd keeps every
// revision until someone compacts it and stops taking writes once its
// quota is full, so there the apiserver's compactor runs, as it does in
// Kubernetes.
func (d *Datastore) CompactionInterval() time.Duration {
	if d.backend == "etcd" {
		return EtcdCompactionInterval
	}
	return APIServerCompactionInterval
}

// Backend is "sqlite", "postgres" or "etcd".
func (d *Datastore) Backend() string { return d.backend }

// Close stops kine. Call it only after the apiserver has stopped: it still
// holds connections until then.
func (d *Datastore) Close() error {
	if d.sql != nil {
		_ = d.sql.Close()
	}
	d.cancel()
	return nil
}

// SQL is the SQL database behind kine, at this binary's schema version,
// for the tables muster keeps beside kine's (migrations/); nil on etcd.
func (d *Datastore) SQL() *sql.DB { return d.sql }

func backendOf(endpoint string) (string, error) {
	if endpoint == "" {
		return "sqlite", nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("--datastore-endpoint is not a URL (%s); use postgres://user:pass@host:5432/db, https://etcd:2379, or leave it empty for SQLite", redact(errString(err), endpoint))
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return "postgres", nil
	case "http", "https":
		return "etcd", nil
	case "sqlite":
		return "", errors.New("--datastore-endpoint sqlite:// is not supported: leave it empty and SQLite lives in --data-dir")
	default:
		return "", fmt.Errorf("--datastore-endpoint scheme %q is not supported: use postgres://, http(s):// (etcd), or leave it empty for SQLite", u.Scheme)
	}
}

func pingPostgres(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("--datastore-endpoint is not a valid PostgreSQL DSN: %s", redact(err.Error(), dsn))
	}
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var last error
	nextSay := time.Now().Add(waitingSayEvery)
	for {
		// The database itself may not exist yet (kine creates it), so probe
		// the server through the maintenance database.
		probe := cfg.Copy()
		probe.Database = "postgres"
		conn, err := pgx.ConnectConfig(cctx, probe)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		last = err
		if time.Now().After(nextSay) {
			// A server that says nothing while it dials looks hung: the
			// operator sees what it waits for and why it cannot get it.
			klog.Warningf("still waiting for the datastore at %s (password redacted): %s", redact(dsn, dsn), redact(err.Error(), dsn))
			nextSay = time.Now().Add(waitingSayEvery)
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("cannot reach PostgreSQL at %s within %s: %s; check that it is running and that --datastore-endpoint has the right host, port, user and password",
				where, connectTimeout, redact(last.Error(), dsn))
		case <-time.After(time.Second):
		}
	}
}

// lockPostgresSetup holds an advisory lock, per database, while a server
// sets up kine's schema and applies migrations. It lives in the maintenance
// database because the target database may not exist yet; advisory locks
// are per database, so the key names the target.
func lockPostgresSetup(ctx context.Context, dsn string) (func(), error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("--datastore-endpoint is not a valid PostgreSQL DSN: %s", redact(err.Error(), dsn))
	}
	target := cfg.Database
	probe := cfg.Copy()
	probe.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, probe)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL to set up the datastore: %s", redact(err.Error(), dsn))
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('muster-setup:' || $1))`, target); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("taking the datastore setup lock: %s", redact(err.Error(), dsn))
	}
	return func() { conn.Close(context.Background()) }, nil
}

// userinfoPassword matches the password of a URL that url.Parse may refuse.
var userinfoPassword = regexp.MustCompile(`(://[^:/@]*:)[^@]*@`)

// redact removes the password of dsn from msg, so no error or log line
// carries a datastore credential.
func redact(msg, dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return userinfoPassword.ReplaceAllString(msg, "${1}xxxxx@")
}

func errString(err error) string {
	if err == nil {
		return "no scheme"
	}
	return err.Error()
}

package snapshot

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/muster-io/muster/internal/datadir"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/muster-io/muster/internal/store"
)

// Datastore is a connection a command made to a datastore.
type Datastore struct {
	Client  *clientv3.Client
	Backend string
	// Online is true when it goes through a running server's kine.
	Online bool
	// SQL is the database the transition history table is in, and
	// Dialect its kind (internal/sqldialect); nil on etcd.
	SQL     *sql.DB
	Dialect string
	close   []func()
}

// Close ends the connection and what was started for it.
func (d *Datastore) Close() {
	for i := len(d.close) - 1; i >= 0; i-- {
		d.close[i]()
	}
}

// Open reaches the datastore of dataDir/endpoint from a command. With
// online set, SQLite is read through the running server's kine socket when
// it answers (a second kine on one SQLite file would contend with the
// server's writer); otherwise the data dir is locked against a server
// starting, and kine runs in this process with its socket in a temporary
// directory. PostgreSQL gets kine in this process either way, as one more
// HA member would.
//
// tlsFiles reach an external etcd; they are ignored for SQL endpoints, so
// a command given both a source and a target uses them for the etcd one.
//
// locked says this process already holds the data dir's lock (a migrate
// opens its target after its source, in one process).
func Open(ctx context.Context, dataDir, endpoint string, tlsFiles store.TLSFiles, online, locked bool) (*Datastore, error) {
	d := &Datastore{}
	layout, err := datadir.New(dataDir)
	if err != nil {
		return nil, err
	}
	if endpoint == "" {
		sock := layout.KineSocket
		if online {
			if c := dialSocket(ctx, sock); c != nil {
				d.Client, d.Backend, d.Online = c, "sqlite", true
				d.close = append(d.close, func() { c.Close() })
				// The server's own SQLite file, read beside it (WAL
				// lets a reader in while the server writes).
				db, dialect, err := store.OpenSQL(dataDir, "")
				if err != nil {
					d.Close()
					return nil, err
				}
				d.SQL, d.Dialect = db, dialect
				d.close = append(d.close, func() { db.Close() })
				return d, nil
			}
		}
		if !locked {
			l, err := datadir.Lock(layout.Dir)
			if err != nil {
				return nil, err
			}
			d.close = append(d.close, func() { l.Close() })
		}
	}
	sockDir, err := os.MkdirTemp("", "muster-datastore-")
	if err != nil {
		d.Close()
		return nil, err
	}
	d.close = append(d.close, func() { os.RemoveAll(sockDir) })
	if !store.IsEtcd(endpoint) {
		tlsFiles = store.TLSFiles{}
	}
	ds, err := store.Open(ctx, store.Config{DataDir: dataDir, Endpoint: endpoint, SocketDir: sockDir, TLS: tlsFiles, Quiet: true})
	if err != nil {
		d.Close()
		return nil, err
	}
	d.close = append(d.close, func() { ds.Close() })
	c, err := ds.Client()
	if err != nil {
		d.Close()
		return nil, err
	}
	d.close = append(d.close, func() { c.Close() })
	d.Client, d.Backend = c, ds.Backend()
	d.SQL, d.Dialect = ds.SQL(), ds.Backend()
	return d, nil
}

// dialSocket returns a client on a running server's kine, nil if none answers.
func dialSocket(ctx context.Context, sock string) *clientv3.Client {
	if _, err := os.Stat(sock); err != nil {
		return nil
	}
	// A stopped server leaves its socket file behind: one plain connect
	// tells, before the etcd client spends its timeouts retrying (and
	// logging) against nothing.
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return nil
	}
	conn.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + sock}, DialTimeout: 2 * time.Second})
	if err != nil {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.Get(gctx, "/registry/health"); err != nil {
		c.Close()
		return nil
	}
	return c
}

// Describe is a one-line summary of a result.
func (r Result) Describe(verb string) string {
	size := ""
	if r.Bytes > 0 {
		size = fmt.Sprintf(", %d bytes", r.Bytes)
	}
	return fmt.Sprintf("%s %d keys and %d transition history rows at revision %d from %s in %s%s", verb, r.Keys, r.HistoryRows, r.Revision, r.Backend, r.Duration.Round(time.Millisecond), size)
}

// HistoryNote says, when the source's history writer was behind, what
// that means for the new datastore's history; "" when it was not.
func (r Result) HistoryNote() string {
	if r.HistoryBehind == 0 {
		return ""
	}
	if r.HistoryUnrecorded < 0 {
		return fmt.Sprintf("note: the transition history table's writer had read the datastore only up to revision %d, and %d objects were written after it (was --transition-history turned off?): "+
			"their transitions may be missing from the history table; the new datastore's servers record them from the objects' status.transitions (the last 20 of each)", r.HistoryBehind, -r.HistoryUnrecorded)
	}
	return fmt.Sprintf("note: %d transitions of objects written after revision %d were not in the transition history table yet (its server stopped before its history writer read them); "+
		"the new datastore's servers record them from the objects' status.transitions (the last 20 of each)", r.HistoryUnrecorded, r.HistoryBehind)
}

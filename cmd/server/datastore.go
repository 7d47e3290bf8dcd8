package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/snapshot"
	"github.com/muster-io/muster/internal/snapshot/s3store"
	"github.com/muster-io/muster/internal/store"
)

// datastoreSource is the datastore a command reads or writes: SQLite in
// --data-dir, or the endpoint in --datastore-endpoint-file or
// $MUSTER_DATASTORE_ENDPOINT (never on the command line: it holds a password).
// takeSnapshot writes the datastore of cfg's data dir (or endpoint) to file,
// with its history and the deployment it belongs to: a restore into
// another deployment's data dir is refused by it.
func takeSnapshot(ctx context.Context, cfg *server.Config, endpoint string, tlsFiles store.TLSFiles, file string) (snapshot.Result, error) {
	ds, err := snapshot.Open(ctx, cfg.DataDir, endpoint, tlsFiles, true, false)
	if err != nil {
		return snapshot.Result{}, err
	}
	defer ds.Close()
	ca, err := snapshot.DeploymentOf(cfg.DataDir)
	if err != nil {
		return snapshot.Result{}, err
	}
	return snapshot.Take(ctx, ds.Client, ds.Backend, file, snapshot.HistoryFrom(ds.SQL, ds.Dialect), snapshot.Of(ca))
}

func datastoreEndpoint(file string) (string, error) {
	return secretSource{flag: "datastore-endpoint", fileFlag: "datastore-endpoint-file", env: "MUSTER_DATASTORE_ENDPOINT", file: file}.resolve()
}

func newDatastoreCommand(cfg *server.Config) *cobra.Command {
	var endpointFile string
	var tlsFiles store.TLSFiles
	var objectStore s3store.Config
	cmd := groupCommand("datastore", "Snapshot, restore and migrate the datastore")
	cmd.PersistentFlags().StringVar(&endpointFile, "datastore-endpoint-file", "", "file holding the datastore endpoint (default $MUSTER_DATASTORE_ENDPOINT; neither: SQLite in --data-dir)")
	datastoreTLSFlags(cmd.PersistentFlags(), &tlsFiles)
	s3Flags(cmd.PersistentFlags(), &objectStore, "s3-", false)

	snap := &cobra.Command{
		Use:   "snapshot FILE|s3://BUCKET/PREFIX/[NAME]",
		Short: "Write every Muster key, at one revision, to FILE (mode 0600) or to an object in S3-compatible storage; the servers may be running",
		Long: `snapshot writes every Muster key, at one revision, to FILE (mode 0600), or
to s3://BUCKET/PREFIX/NAME in S3-compatible object storage (--s3-endpoint,
the key in --s3-credentials-file or $AWS_ACCESS_KEY_ID and
$AWS_SECRET_ACCESS_KEY). Without NAME (s3://BUCKET/PREFIX/) it is called
on-demand-<time>.snapshot, which the server's retention never deletes.
The upload is verified by the SHA-256 the store keeps.`,
		Args: oneArg("FILE", "where to write the snapshot"),
		RunE: func(cmd *cobra.Command, args []string) error {
			endpoint, err := datastoreEndpoint(endpointFile)
			if err != nil {
				return err
			}
			if s3store.IsURL(args[0]) {
				return snapshotToObjectStore(cmd, cfg, objectStore, endpoint, tlsFiles, args[0])
			}
			res, err := takeSnapshot(cmd.Context(), cfg, endpoint, tlsFiles, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], res.Describe("snapshot of"))
			if n := res.HistoryNote(); n != "" {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			return nil
		},
	}
	restore := &cobra.Command{
		Use:   "restore FILE|s3://BUCKET/PREFIX/NAME",
		Short: "Write a snapshot, from a file or S3-compatible storage, into an empty datastore (SQLite in a new --data-dir, or an empty PostgreSQL database); no server may run on it",
		Long: `restore writes every key of a snapshot into an empty datastore. Then start
muster-server on it with the server token of the deployment the snapshot
came from (--token-file): it opens the sealed CA, and agents keep their
certificates and do not register again. The transition history the
snapshot holds goes into the new datastore's history table.

A snapshot in S3-compatible object storage, s3://BUCKET/PREFIX/NAME, is
downloaded first (--s3-endpoint, the key in --s3-credentials-file or
$AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY) to a temporary file of mode
0600, checked against the SHA-256 the store keeps, and removed after.

Refused, with nothing written: a snapshot that is cut short or damaged
(see datastore verify), a datastore that holds any key or history row, and
a data dir of another deployment (its CA is not the snapshot's, or its
server token does not open the snapshot's sealed CA).`,
		Args: oneArg("FILE", "a file written by muster-server datastore snapshot, or s3://BUCKET/PREFIX/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			endpoint, err := datastoreEndpoint(endpointFile)
			if err != nil {
				return err
			}
			if s3store.IsURL(args[0]) {
				file, cleanup, err := downloadSnapshot(cmd, objectStore, args[0])
				if err != nil {
					return err
				}
				defer cleanup()
				args = []string{file}
			}
			// Every check that needs only the file and the data dir,
			// before the datastore is opened (which creates an SQLite
			// database in a new data dir).
			snap, err := snapshot.Load(args[0])
			if err != nil {
				return err
			}
			if err := snapshot.CheckTarget(snap, cfg.DataDir); err != nil {
				return err
			}
			ds, err := snapshot.Open(cmd.Context(), cfg.DataDir, endpoint, tlsFiles, false, false)
			if err != nil {
				return err
			}
			defer ds.Close()
			res, err := snapshot.RestoreLoaded(cmd.Context(), ds.Client, snap, snapshot.HistoryTo(ds.SQL, ds.Dialect))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s into %s\n", res.Describe("restored"), ds.Backend)
			if ds.SQL == nil && len(snap.History) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s has no transition history table (no SQL): the snapshot's %d history rows were not restored; keep the snapshot to read them\n", ds.Backend, len(snap.History))
			}
			return nil
		},
	}
	var to, toFile string
	migrate := &cobra.Command{
		Use:   "migrate --to-file FILE",
		Short: "Copy a stopped server's datastore into another, empty one: SQLite to PostgreSQL, or back",
		Long: `migrate copies every Muster key from the datastore of a stopped server (SQLite
in --data-dir, or --datastore-endpoint-file) into an empty one: PostgreSQL
named by --to-file or $MUSTER_DATASTORE_TARGET (or an external etcd, https://,
reached with --datastore-cafile/certfile/keyfile), or "sqlite" for SQLite in
--data-dir. Then start the server with the same --data-dir on the new
datastore; agents keep their certificates and do not register again.
The transition history table comes along, in batches.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			endpoint, err := datastoreEndpoint(endpointFile)
			if err != nil {
				return err
			}
			if passwordInURL(to) {
				return fmt.Errorf("--to holds a password, which every local user could read on this command line: put the endpoint in a file and give --to-file, or set $MUSTER_DATASTORE_TARGET")
			}
			target, err := secretSource{flag: "to", fileFlag: "to-file", env: "MUSTER_DATASTORE_TARGET", value: to, file: toFile}.resolve()
			if err != nil {
				return err
			}
			switch target {
			case "":
				return fmt.Errorf("give the target datastore: --to-file FILE (or $MUSTER_DATASTORE_TARGET) holding postgres://..., or --to sqlite for SQLite in --data-dir")
			case "sqlite":
				target = ""
			}
			if target == endpoint {
				return fmt.Errorf("the source and the target are the same datastore")
			}
			// The source is locked (SQLite) against a server starting
			// during the copy; the target is opened after it, in this
			// process, so the data dir's lock is taken once.
			src, err := snapshot.Open(cmd.Context(), cfg.DataDir, endpoint, tlsFiles, false, false)
			if err != nil {
				return err
			}
			defer src.Close()
			// An SQLite source holds the data dir's lock already.
			dst, err := snapshot.Open(cmd.Context(), cfg.DataDir, target, tlsFiles, false, endpoint == "")
			if err != nil {
				return err
			}
			defer dst.Close()
			res, err := snapshot.Copy(cmd.Context(), src.Client, dst.Client, src.Backend,
				snapshot.HistoryFrom(src.SQL, src.Dialect), snapshot.HistoryTo(dst.SQL, dst.Dialect))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s into %s; start muster-server with the same --data-dir on the new datastore\n", res.Describe("migrated"), dst.Backend)
			if n := res.HistoryNote(); n != "" {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			if src.SQL != nil && dst.SQL == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s has no transition history table (no SQL): the history stays in the source datastore\n", dst.Backend)
			}
			return nil
		},
	}
	migrate.Flags().StringVar(&to, "to", "", `target datastore: "sqlite" (SQLite in --data-dir); for PostgreSQL use --to-file, its DSN holds a password`)
	migrate.Flags().StringVar(&toFile, "to-file", "", "file holding the target datastore endpoint (postgres://... or https:// for etcd), default $MUSTER_DATASTORE_TARGET")
	verify := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a snapshot whole (format, every record, its SHA-256) without restoring it",
		Long: `verify reads a snapshot and checks every line of it against the SHA-256
its end line records, and its key and history row counts against its
header. It prints what the snapshot holds and exits 0, or says what is
wrong (cut short, a changed byte, not a snapshot) and exits 1. It opens no
datastore.`,
		Args: oneArg("FILE", "a file written by muster-server datastore snapshot"),
		RunE: func(cmd *cobra.Command, args []string) error {
			snap, err := snapshot.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], snap.Describe())
			return nil
		},
	}
	cmd.AddCommand(snap, restore, migrate, verify)
	return cmd
}

// datastoreTLSFlags are the files an external etcd is reached with; paths,
// so the key stays in a file of mode 0600 and off the command line.
func datastoreTLSFlags(fl *pflag.FlagSet, f *store.TLSFiles) {
	fl.StringVar(&f.CAFile, "datastore-cafile", "", "external etcd: CA certificate that signed etcd's serving certificate")
	fl.StringVar(&f.CertFile, "datastore-certfile", "", "external etcd: client certificate etcd's --client-cert-auth accepts")
	fl.StringVar(&f.KeyFile, "datastore-keyfile", "", "external etcd: private key of --datastore-certfile; the file must have mode 0600")
}

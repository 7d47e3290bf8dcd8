package main

import (
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
			ds, err := snapshot.Open(cmd.Context(), cfg.DataDir, endpoint, tlsFiles, true, false)
			if err != nil {
				return err
			}
			defer ds.Close()
			res, err := snapshot.Take(cmd.Context(), ds.Client, ds.Backend, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], res.Describe("snapshot of"))
			return nil
		},
	}
	restore := &cobra.Command{
		Use:   "restore FILE|s3://BUCKET/PREFIX/NAME",
		Short: "Write a snapshot, from a file or S3-compatible storage, into an empty datastore (SQLite in a new --data-dir, or an empty PostgreSQL database); no server may run on it",
		Long: `restore writes every key of a snapshot into an empty datastore. Then start
muster-server on it with the server token of the deployment the snapshot
came from (--token-file): it opens the sealed CA, and agents keep their
certificates and do not register again.

A snapshot in S3-compatible object storage, s3://BUCKET/PREFIX/NAME, is
downloaded first (--s3-endpoint, the key in --s3-credentials-file or
$AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY) to a temporary file of mode
0600, checked against the SHA-256 the store keeps, and removed after.`,
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
			if _, _, err := snapshot.Read(args[0]); err != nil {
				return err
			}
			ds, err := snapshot.Open(cmd.Context(), cfg.DataDir, endpoint, tlsFiles, false, false)
			if err != nil {
				return err
			}
			defer ds.Close()
			res, err := snapshot.Restore(cmd.Context(), ds.Client, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s into %s\n", res.Describe("restored"), ds.Backend)
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
datastore; agents keep their certificates and do not register again.`,
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
			res, err := snapshot.Copy(cmd.Context(), src.Client, dst.Client, src.Backend)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s into %s; start muster-server with the same --data-dir on the new datastore\n", res.Describe("migrated"), dst.Backend)
			return nil
		},
	}
	migrate.Flags().StringVar(&to, "to", "", `target datastore: "sqlite" (SQLite in --data-dir); for PostgreSQL use --to-file, its DSN holds a password`)
	migrate.Flags().StringVar(&toFile, "to-file", "", "file holding the target datastore endpoint (postgres://... or https:// for etcd), default $MUSTER_DATASTORE_TARGET")
	cmd.AddCommand(snap, restore, migrate)
	return cmd
}

// datastoreTLSFlags are the files an external etcd is reached with; paths,
// so the key stays in a file of mode 0600 and off the command line.
func datastoreTLSFlags(fl *pflag.FlagSet, f *store.TLSFiles) {
	fl.StringVar(&f.CAFile, "datastore-cafile", "", "external etcd: CA certificate that signed etcd's serving certificate")
	fl.StringVar(&f.CertFile, "datastore-certfile", "", "external etcd: client certificate etcd's --client-cert-auth accepts")
	fl.StringVar(&f.KeyFile, "datastore-keyfile", "", "external etcd: private key of --datastore-certfile; the file must have mode 0600")
}

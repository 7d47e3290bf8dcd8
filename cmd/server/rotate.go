package main

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/snapshot"
	"github.com/muster-io/muster/internal/store"
)

func newTokenRotateCommand(cfg *server.Config) *cobra.Command {
	var newToken, newTokenFile, oldTokenFile, endpointFile string
	var tlsFiles store.TLSFiles
	cmd := &cobra.Command{
		Use:   "rotate --new-token-file FILE",
		Short: "Re-seal the shared bootstrap data (the cluster CA) with a new server token",
		Long: `rotate re-seals the cluster CA in the datastore with a new server token and
writes the new token into --data-dir. The CA stays the same, so agents and
their certificates are not affected, and running servers keep serving.
Then, on every other server of the deployment, run the same command with
its --data-dir (it finds the datastore already re-sealed and only updates
that data dir's token), and restart the servers one at a time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if newToken != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: --new-token is visible to every local user in this process's command line: prefer --new-token-file or $MUSTER_NEW_TOKEN")
			}
			next, err := secretSource{flag: "new-token", fileFlag: "new-token-file", env: "MUSTER_NEW_TOKEN", value: newToken, file: newTokenFile}.resolve()
			if err != nil {
				return err
			}
			if next == "" {
				return errors.New("give the new server token: --new-token-file FILE (or $MUSTER_NEW_TOKEN); generate one with: openssl rand -hex 32")
			}
			old, err := currentServerToken(cfg.DataDir, oldTokenFile)
			if err != nil {
				return err
			}
			endpoint, err := datastoreEndpoint(endpointFile)
			if err != nil {
				return err
			}
			ds, err := snapshot.Open(cmd.Context(), cfg.DataDir, endpoint, tlsFiles, true, false)
			if err != nil {
				return err
			}
			defer ds.Close()
			resealed, err := bootstrap.RotateStored(cmd.Context(), ds.Client, old, next)
			if err != nil {
				return err
			}
			if resealed {
				fmt.Fprintln(cmd.OutOrStdout(), "re-sealed the cluster CA with the new server token")
			} else {
				// Already re-sealed (by this command on another server).
				fmt.Fprintln(cmd.OutOrStdout(), "the datastore is already sealed with the new token")
			}
			if have, _ := bootstrap.ReadToken(cfg.DataDir); have != "" && !bytes.Equal([]byte(have), []byte(next)) {
				if err := bootstrap.WriteToken(cfg.DataDir, next); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote the new token into %s; restart this server, and run this command with the --data-dir of every other server\n", cfg.DataDir)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&newToken, "new-token", "", "the new server token; visible in /proc/<pid>/cmdline: prefer --new-token-file")
	f.StringVar(&newTokenFile, "new-token-file", "", "file holding the new server token (default $MUSTER_NEW_TOKEN)")
	f.StringVar(&oldTokenFile, "token-file", "", "file holding the current server token (default $MUSTER_TOKEN, else --data-dir's)")
	f.StringVar(&endpointFile, "datastore-endpoint-file", "", "file holding the datastore endpoint (default $MUSTER_DATASTORE_ENDPOINT; neither: SQLite in --data-dir)")
	datastoreTLSFlags(f, &tlsFiles)
	return cmd
}

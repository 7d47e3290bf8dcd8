package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/snapshot"
	"github.com/muster-io/muster/internal/store"
)

func newCertificateCommand(cfg *server.Config) *cobra.Command {
	cmd := groupCommand("certificate", "Rotate the cluster CA")
	cmd.AddCommand(newRotateCACommand(cfg))
	return cmd
}

func newRotateCACommand(cfg *server.Config) *cobra.Command {
	var retire bool
	var tokenFile, endpointFile string
	var tlsFiles store.TLSFiles
	cmd := &cobra.Command{
		Use:   "rotate-ca [--retire]",
		Short: "Replace the cluster CA without re-joining a machine",
		Long: `rotate-ca stages a new cluster CA in the datastore. Restart every server
(one at a time): from then on the new CA signs every certificate, and both
CAs are trusted (/cacerts serves both). Each agent notices the new bundle
within its --ca-check-interval, stores it, and renews its certificate under
the new CA, without joining again. Join tokens made before the rotation
are refused (their CA hash no longer matches): make new ones.

rotate-ca --retire ends the rotation once every agent holds a certificate
from the new CA: restart the servers again, and they trust only the new
CA; kubeconfigs and certificates of the old one are refused. Re-fetch the
admin kubeconfig (muster-server kubeconfig) after each restart.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := secretSource{flag: "token", fileFlag: "token-file", env: "MUSTER_TOKEN", file: tokenFile}.resolve()
			if err != nil {
				return err
			}
			if token == "" {
				if token, err = bootstrap.ReadToken(cfg.DataDir); err != nil {
					return err
				}
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
			if retire {
				hash, err := bootstrap.RetireCA(cmd.Context(), ds.Client, token)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "retired the CA sha256 %s: restart every server; from then on certificates and kubeconfigs of that CA are refused\n", hash)
				return nil
			}
			hash, err := bootstrap.RotateCA(cmd.Context(), ds.Client, token)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "staged the new CA sha256 %s beside the current one: restart every server, wait until every agent has renewed its certificate, then run 'muster-server certificate rotate-ca --retire'\n", hash)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&retire, "retire", false, "end the rotation: drop the old CA")
	f.StringVar(&tokenFile, "token-file", "", "file holding the server token (default $MUSTER_TOKEN, else --data-dir's)")
	f.StringVar(&endpointFile, "datastore-endpoint-file", "", "file holding the datastore endpoint (default $MUSTER_DATASTORE_ENDPOINT; neither: SQLite in --data-dir)")
	datastoreTLSFlags(f, &tlsFiles)
	return cmd
}

package main

import (
	"crypto/x509"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/snapshot"
	"github.com/muster-io/muster/internal/store"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func newCertificateCommand(cfg *server.Config) *cobra.Command {
	cmd := groupCommand("certificate", "Rotate the cluster CA")
	cmd.AddCommand(newRotateCACommand(cfg))
	return cmd
}

func newRotateCACommand(cfg *server.Config) *cobra.Command {
	var retire, force bool
	var tokenFile, endpointFile, kubeconfigPath string
	var tlsFiles store.TLSFiles
	cmd := &cobra.Command{
		Use:   "rotate-ca [--retire]",
		Short: "Replace the cluster CA without re-joining a machine",
		Long: `rotate-ca stages a new cluster CA in the datastore. Every running server
takes it within seconds, without a restart (each watches the sealed CA in
the datastore; a server started later takes it at start): from then on the
new CA signs every certificate, and both CAs are trusted (/cacerts serves
both). Each agent notices the new bundle within its --ca-check-interval,
stores it, and renews its certificate under the new CA, without joining
again. Join tokens made before the rotation are refused (their CA hash no
longer matches): make new ones.

rotate-ca --retire ends the rotation once every agent holds a certificate
from the new CA (it asks the running server, and refuses naming the
machines still behind, unless --force): within seconds every running
server serves a certificate of the new CA and trusts only it; kubeconfigs
and certificates of the old one are refused, on connections already open
too. Re-fetch the admin kubeconfig (muster-server kubeconfig) after each
step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := currentServerToken(cfg.DataDir, tokenFile)
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
			if retire && !force {
				shared, err := bootstrap.StoredCA(cmd.Context(), ds.Client, token)
				if err != nil {
					return err
				}
				if shared.Retiring == nil {
					return bootstrap.ErrNotStaged
				}
				c, err := adminClient(cfg, &kubeconfigPath)(cmd)
				if err != nil {
					return fmt.Errorf("%w: --retire asks a running server which machines hold a certificate of the new CA; start one, or give --force to retire without checking", err)
				}
				machines, err := c.MusterV1alpha1().Machines().List(cmd.Context(), metav1.ListOptions{})
				if err != nil {
					return fmt.Errorf("listing the machines to check their certificates: %w (or give --force to retire without checking)", err)
				}
				regs, err := c.MusterV1alpha1().ClusterRegistrations().List(cmd.Context(), metav1.ListOptions{})
				if err != nil {
					return fmt.Errorf("listing the registrations to check the machines' certificates: %w (or give --force to retire without checking)", err)
				}
				if behind := machinesBehind(machines.Items, regs.Items, shared.CertPEM); len(behind) > 0 {
					return fmt.Errorf("%d machine(s) hold no certificate of the new CA yet: %s. Wait for their agents to renew "+
						"(each does within its --ca-check-interval while it runs); a machine that stays behind must join again after --retire. "+
						"--force retires now, and those agents are then refused; nothing was changed",
						len(behind), strings.Join(behind, ", "))
				}
			}
			if retire {
				hash, err := bootstrap.RetireCA(cmd.Context(), ds.Client, token)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "retired the CA sha256 %s: within seconds every running server trusts only the new CA (no restart needed): certificates and kubeconfigs of the retired one are refused; re-fetch the admin kubeconfig (muster-server kubeconfig)\n", hash)
				return nil
			}
			hash, err := bootstrap.RotateCA(cmd.Context(), ds.Client, token)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "staged the new CA sha256 %s beside the current one: every running server takes it within seconds (no restart needed); wait until every agent has renewed its certificate, then run 'muster-server certificate rotate-ca --retire'\n", hash)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&retire, "retire", false, "end the rotation: drop the old CA (refused while a machine holds no certificate of the new CA, unless --force)")
	f.BoolVar(&force, "force", false, "with --retire: retire without checking the machines' certificates")
	f.StringVar(&kubeconfigPath, "kubeconfig", "", kubeconfigUsage)
	f.StringVar(&tokenFile, "token-file", "", "file holding the server token (default $MUSTER_TOKEN, else --data-dir's)")
	f.StringVar(&endpointFile, "datastore-endpoint-file", "", "file holding the datastore endpoint (default $MUSTER_DATASTORE_ENDPOINT; neither: SQLite in --data-dir)")
	datastoreTLSFlags(f, &tlsFiles)
	return cmd
}

// machinesBehind names the machines whose newest granted certificate is
// not one of newCA (or that have none): retiring the old CA would lock
// their agents out.
func machinesBehind(machines []api.Machine, regs []api.ClusterRegistration, newCA []byte) []string {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(newCA)
	// The newest granted registration of each machine holds the
	// certificate its agent uses (housekeeping deletes the ones it superseded).
	newest := map[string]*x509.Certificate{}
	created := map[string]time.Time{}
	for _, r := range regs {
		if r.Status.Phase != api.RegistrationPhaseGranted || r.Status.Machine == "" {
			continue
		}
		certs, err := pki.ParseCertsPEM(r.Status.Certificate)
		if err != nil || len(certs) == 0 {
			continue
		}
		if n := newest[r.Status.Machine]; n == nil || r.CreationTimestamp.Time.After(created[r.Status.Machine]) {
			newest[r.Status.Machine] = certs[0]
			created[r.Status.Machine] = r.CreationTimestamp.Time
		}
	}
	var behind []string
	for _, m := range machines {
		cert := newest[m.Name]
		if cert == nil {
			behind = append(behind, m.Name)
			continue
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			behind = append(behind, m.Name)
		}
	}
	sort.Strings(behind)
	return behind
}

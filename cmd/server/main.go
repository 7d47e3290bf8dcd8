// Command muster-server is the Muster control plane: flags here, everything
// else in internal/.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/muster-io/muster/internal/apiserver"
	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/join"
	"github.com/muster-io/muster/internal/lifecycle"
	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/version"
)

func main() {
	os.Exit(cli.Run(newRootCommand()))
}

func newRootCommand() *cobra.Command {
	cfg := server.Config{}
	cmd := &cobra.Command{
		Use:   "muster-server",
		Short: "Muster registers machines and clusters and drives their lifecycle",
		Long: `muster-server serves the muster.io API. With no flags it keeps its state in
SQLite in its data dir, and on first start generates a CA, a serving
certificate, a server token and an admin kubeconfig there.`,
		Version:      version.Version,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Token == "" {
				cfg.Token = os.Getenv("MUSTER_TOKEN")
			}
			return server.Run(genericapiserver.SetupSignalContext(), cfg)
		},
	}
	f := cmd.PersistentFlags()
	f.StringVar(&cfg.DataDir, "data-dir", server.DefaultDataDir(), "directory for the database, certificates, token and admin kubeconfig")
	fl := cmd.Flags()
	fl.IntVar(&cfg.HTTPSPort, "https-port", 9443, "HTTPS port of the API")
	fl.StringVar(&cfg.BindAddress, "bind-address", "0.0.0.0", "address the API listens on")
	fl.StringVar(&cfg.AdvertiseAddress, "advertise-address", "", "address agents and other servers use to reach this server (default: the first non-loopback IPv4)")
	fl.StringSliceVar(&cfg.TLSSANs, "tls-san", nil, "extra DNS name or IP for the serving certificate (repeatable)")
	fl.StringVar(&cfg.DatastoreEndpoint, "datastore-endpoint", "", "datastore: empty for SQLite in the data dir, postgres://user:pass@host:port/db, or http(s)://etcd:2379")

	fl.StringVar(&cfg.Token, "token", "", "server token shared by every server on one datastore (default: $MUSTER_TOKEN, else the data dir's, else generated); it seals the CA in the datastore")
	fl.DurationVar(&cfg.DatastorePollInterval, "datastore-poll-interval", 0, "how often to poll the datastore for other servers' changes (default 100ms for PostgreSQL, 1s for SQLite)")

	fl.DurationVar(&cfg.AgentCertificateValidity, "agent-certificate-validity", join.DefaultCertificateValidity, "lifetime of the client certificates granted to agents; they renew at two thirds of it")
	fl.Float64Var(&cfg.JoinRate, "join-rate-limit", join.DefaultTokenJoinRate, "registrations per second one join token may make; more get 429 and retry")
	fl.IntVar(&cfg.JoinBurst, "join-burst", join.DefaultTokenJoinBurst, "registrations one join token may make at once before --join-rate-limit applies")

	fl.IntVar(&cfg.MaxRequestsInFlight, "max-requests-inflight", apiserver.DefaultMaxRequestsInFlight, "requests served at once (watches excluded); more get 429 and retry")
	fl.IntVar(&cfg.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", apiserver.DefaultMaxMutatingRequestsInFlight, "writes served at once; more get 429 and retry")

	fl.DurationVar(&cfg.AgentSilenceThreshold, "agent-silence-threshold", lifecycle.DefaultSilenceThreshold, "how long an agent may go unheard before its Machine is Unavailable (agents heartbeat every 5s)")

	cmd.AddCommand(newKubeconfigCommand(&cfg), newTokenCommand(&cfg), newRegistrationCommand(&cfg))
	return cmd
}

func newKubeconfigCommand(cfg *server.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the admin kubeconfig of this server's data dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := bootstrap.ReadAdminKubeconfig(cfg.DataDir)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), string(b))
			return err
		},
	}
}

// Command muster-server is the Muster control plane: flags here, everything
// else in internal/.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/muster-io/muster/internal/datadir"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/apiserver"
	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/events"
	"github.com/muster-io/muster/internal/join"
	"github.com/muster-io/muster/internal/kubeconfig"
	"github.com/muster-io/muster/internal/lifecycle"
	"github.com/muster-io/muster/internal/logformat"
	"github.com/muster-io/muster/internal/manifests"
	"github.com/muster-io/muster/internal/notify"
	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/version"
)

func main() {
	os.Exit(cli.Run(newRootCommand()))
}

func newRootCommand() *cobra.Command {
	cfg := server.Config{Audit: genericoptions.NewAuditOptions()}
	var endpointFile, tokenFile, logFormat string
	var notifyAllowed []string
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
			if err := logformat.Apply(logFormat, os.Stderr); err != nil {
				return err
			}
			if passwordInURL(cfg.DatastoreEndpoint) {
				klog.Warning("--datastore-endpoint holds a password, which every local user can read in this process's command line: use --datastore-endpoint-file or $MUSTER_DATASTORE_ENDPOINT")
			}
			var err error
			if cfg.NotifyDestinations, err = notify.NewDestinations(notifyAllowed); err != nil {
				return err
			}
			endpoint := secretSource{flag: "datastore-endpoint", fileFlag: "datastore-endpoint-file", env: "MUSTER_DATASTORE_ENDPOINT", value: cfg.DatastoreEndpoint, file: endpointFile}
			if cfg.DatastoreEndpoint, err = endpoint.resolve(); err != nil {
				return err
			}
			token := secretSource{flag: "token", fileFlag: "token-file", env: "MUSTER_TOKEN", value: cfg.Token, file: tokenFile}
			if cfg.Token, err = token.resolve(); err != nil {
				return err
			}
			if err := checkHostAgentFlags(cfg); err != nil {
				return err
			}
			if errs := cfg.Audit.Validate(); len(errs) > 0 {
				return fmt.Errorf("audit flags: %v (kube-apiserver's --audit-* flags: see docs/security.md, \"Audit\")", errors.Join(errs...))
			}
			return server.Run(genericapiserver.SetupSignalContext(), cfg)
		},
	}
	f := cmd.PersistentFlags()
	f.StringVar(&cfg.DataDir, "data-dir", server.DefaultDataDir(), "directory for the database, certificates, token and admin kubeconfig (client commands: default the data dir of $KUBECONFIG's admin.kubeconfig)")
	// Every client command finds its server by one rule (kubeconfig.Lookup).
	cmd.PersistentPreRun = func(sub *cobra.Command, _ []string) {
		if sub != cmd {
			cfg.DataDir = credential(sub, &cfg, "").ServerDataDir()
		}
	}
	fl := cmd.Flags()
	fl.IntVar(&cfg.HTTPSPort, "https-port", 9443, "HTTPS port of the API")
	fl.StringVar(&cfg.BindAddress, "bind-address", "0.0.0.0", "address the API listens on")
	fl.StringVar(&cfg.AdvertiseAddress, "advertise-address", "", "address agents and other servers use to reach this server (default: the first non-loopback IPv4)")
	fl.StringSliceVar(&cfg.TLSSANs, "tls-san", nil, "extra DNS name or IP for the serving certificate (repeatable)")
	fl.StringVar(&cfg.DatastoreEndpoint, "datastore-endpoint", "", "datastore: empty for SQLite in the data dir, postgres://user:pass@host:port/db, or http(s)://etcd:2379 (default $MUSTER_DATASTORE_ENDPOINT); a password here is visible to local users, prefer --datastore-endpoint-file")
	fl.StringVar(&endpointFile, "datastore-endpoint-file", "", "file holding the --datastore-endpoint, so that its password is not on the command line")
	datastoreTLSFlags(fl, &cfg.DatastoreTLS)
	fl.StringVar(&cfg.AuthenticationConfig, "authentication-config", "", "AuthenticationConfiguration file (kube-apiserver's format, apiserver.config.k8s.io/v1) naming the OIDC identity providers whose ID tokens sign people in: issuer, audiences, certificateAuthority, claimMappings for username and groups (docs/auth.md)")
	fl.StringVar(&cfg.ConsoleOIDC.ClientID, "console-oidc-client-id", "", "offer \"Sign in with <provider>\" on the web console, as this client of the identity provider (one of --authentication-config's, with this client among its audiences; redirect URI https://HOST:PORT/console/oidc/callback)")
	fl.StringVar(&cfg.ConsoleOIDC.Issuer, "console-oidc-issuer", "", "the identity provider of the console's sign-in, when --authentication-config names several")
	fl.StringVar(&cfg.ConsoleOIDC.ClientSecretFile, "console-oidc-client-secret-file", "", "file holding the console client's secret, for a confidential client (PKCE is used either way)")
	fl.StringVar(&cfg.ConsoleOIDC.Name, "console-oidc-name", "", "the identity provider's name on the console's sign-in button (default: its host)")
	fl.DurationVar(&cfg.ConsoleOIDC.SessionTTL, "console-oidc-session-ttl", 8*time.Hour, "how long a console session started with the identity provider lasts")
	fl.StringVar(&cfg.EncryptionProviderConfig, "encryption-provider-config", "", "EncryptionConfiguration file (kube-apiserver's format, mode 0600) whose aesgcm or secretbox keys encrypt MachinePlans and MachinePlanSets at rest; every server of a deployment needs the same file (docs/encryption.md)")

	fl.StringVar(&cfg.Token, "token", "", "server token shared by every server on one datastore (default: --token-file, else $MUSTER_TOKEN, else the data dir's, else generated); it seals the CA in the datastore")
	fl.StringVar(&tokenFile, "token-file", "", "file holding the server token, so that it is not on the command line")
	fl.DurationVar(&cfg.DatastorePollInterval, "datastore-poll-interval", 0, "how often to poll the datastore for other servers' changes (default 100ms for PostgreSQL, 1s for SQLite)")

	fl.DurationVar(&cfg.AgentCertificateValidity, "agent-certificate-validity", join.DefaultCertificateValidity, "lifetime of the client certificates granted to agents; they renew at two thirds of it")
	fl.Float64Var(&cfg.JoinRate, "join-rate-limit", join.DefaultTokenJoinRate, "registrations per second one join token may make; more get 429 and retry")
	fl.IntVar(&cfg.JoinBurst, "join-burst", join.DefaultTokenJoinBurst, "registrations one join token may make at once before --join-rate-limit applies")

	fl.IntVar(&cfg.MaxRequestsInFlight, "max-requests-inflight", apiserver.DefaultMaxRequestsInFlight, "requests served at once (watches excluded); more get 429 and retry")
	fl.IntVar(&cfg.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", apiserver.DefaultMaxMutatingRequestsInFlight, "writes served at once; more get 429 and retry")

	fl.DurationVar(&cfg.EventTTL, "event-ttl", events.DefaultTTL, "how long an Event (kubectl get events) is kept after it last occurred")
	fl.StringVar(&logFormat, "log-format", "text", logformat.Usage)
	fl.DurationVar(&cfg.AgentSilenceThreshold, "agent-silence-threshold", lifecycle.DefaultSilenceThreshold, "how long an agent may go unheard before its Machine is Unavailable (agents heartbeat every 5s)")

	// Install (k3s-style): the binaries install.sh downloads, and the host's own agent.
	fl.StringVar(&cfg.AgentBinary, "agent-binary", "", "muster-agent binary served at /assets/ for install.sh (default: muster-agent beside this executable)")
	fl.StringVar(&cfg.AgentAssetsDir, "agent-assets-dir", "", "directory of muster-agent-<os>-<arch> binaries (make release builds them), each served (public, with .sha256) at /assets/muster-agent-<os>-<arch> for install.sh on hosts of that architecture (default: the directory of this executable)")
	fl.StringVar(&cfg.AgentBinariesDir, "agent-binaries-dir", "", "directory of muster-agent-<version>-<os>-<arch> binaries, served (public, with .sha256) at /assets/agent/<version>/muster-agent-<os>-<arch> for plans that upgrade agents (spec.agentUpgrade)")
	fl.StringVar(&cfg.KubernetesAssetsDir, "kubernetes-assets-dir", "", "directory of Kubernetes binaries by version, DIR/<version>/<os>-<arch>/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}: each served (public, with .sha256) at /assets/kubernetes/<version>/<os>-<arch>/<name>, and downloaded by the planner's plans pinned by its SHA-256 for Clusters with spec.kubernetes that pin no binaries of their own")
	fl.StringVar(&cfg.KubernetesBinDir, "kubernetes-bin-dir", "", "directory on the machines holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, which the planner's plans run for Clusters with spec.kubernetes (default: the machines' PATH)")
	fl.BoolVar(&cfg.WithAgent, "with-agent", false, "also run the agent of this server's own host, joined like any other machine (its state in <data-dir>/agent); it reports in, and refuses exec, port-forward and any plan that does something unless the --host-agent-* flags allow them")
	// The host agent runs as this server's user: whatever it lets
	// operators do, they do as that user, with the CA key in reach.
	fl.BoolVar(&cfg.HostAgent.Exec, "host-agent-exec", false, "with --with-agent: let kubectl muster exec run commands on this host. They run as this server's user (root under install.sh) with its data dir, CA key and admin kubeconfig in reach: this makes every operator (muster:operators) root on this host and admin of Muster")
	fl.BoolVar(&cfg.HostAgent.Plans, "host-agent-plans", false, "with --with-agent: let this host's MachinePlan write files and run instructions and probes. They run as this server's user (root under install.sh) with its data dir, CA key and admin kubeconfig in reach: this makes every operator (muster:operators) root on this host and admin of Muster")
	fl.IntSliceVar(&cfg.HostAgent.AllowPorts, "host-agent-allow-port", nil, "with --with-agent: a port on this host's loopback that kubectl muster port-forward may reach (repeatable; none by default). Every operator reaches whatever listens there as if they were on this host")

	// Machine pools: drivers beyond the built-in ones.
	fl.StringVar(&cfg.DriversDir, "drivers-dir", "", "directory of machine-pool drivers (executables muster-driver-NAME); \"ssh\" is built in, and \"process\" with --enable-process-driver")
	fl.BoolVar(&cfg.EnableProcessDriver, "enable-process-driver", false, "offer the built-in \"process\" machine-pool driver, which runs each machine as a muster-agent process on this host as this server's user: it gives whoever may write MachinePools (operators) a shell as that user (root, if the server runs as root) on this host. For demos and tests")
	fl.StringVar(&cfg.ProcessDriverDir, "process-driver-dir", "", "with --enable-process-driver: directory of the process driver's machines, outside --data-dir (default <data-dir>-process-machines)")
	fl.StringVar(&cfg.ProcessDriverUser, "process-driver-user", "", "with --enable-process-driver: run the machines' agents as this unprivileged user (name or uid; e.g. nobody) instead of the server's user, so that commands run in them cannot read the server's data dir; the server must run as root, and the user must be able to reach --process-driver-dir and the agent binary")

	// Aggregated mode: behind a kube-apiserver (docs/aggregated.md).
	fl.StringVar(&cfg.AuthenticationKubeconfig, "authentication-kubeconfig", "", "aggregated mode: kubeconfig of the kube-apiserver that authenticates the users its aggregator sends (front-proxy headers, TokenReview)")
	fl.StringVar(&cfg.AuthorizationKubeconfig, "authorization-kubeconfig", "", "aggregated mode: kubeconfig of the kube-apiserver that authorizes those users (SubjectAccessReview)")

	// Audit: kube-apiserver's own flags and backends (k8s.io/apiserver);
	// with a backend and no --audit-policy-file, Muster's default policy
	// (internal/auditpolicy).
	// Unlike kube-apiserver, a log is rotated unless told otherwise: an
	// audit log that grows without bound fills the server's disk.
	cfg.Audit.LogOptions.MaxSize, cfg.Audit.LogOptions.MaxBackups, cfg.Audit.LogOptions.MaxAge = 100, 10, 30
	cfg.Audit.AddFlags(fl)

	// Notifications (NotificationSubscriptions, internal/notify).
	fl.StringSliceVar(&notifyAllowed, "notification-allowed-networks", nil, "CIDRs of loopback, link-local or multicast addresses that notification receivers may have (repeatable; e.g. 127.0.0.0/8 for a receiver on this host); others are refused, so that a subscription cannot make the server reach its own host or a cloud's metadata service")
	fl.DurationVar(&cfg.NotifyMaxBackoff, "notification-max-backoff", notify.DefaultMaxBackoff, "longest wait between retries of a notification its receiver failed (the waits double from 1s up to it); a receiver back from an outage gets its events within this")

	// Datastore operations: the transition history.
	fl.BoolVar(&cfg.History, "transition-history", true, "keep every transition of every object in the datastore's muster_transitions table (muster-server history); SQLite and PostgreSQL only")
	fl.DurationVar(&cfg.HistoryRetention.MaxAge, "history-retention", 365*24*time.Hour, "drop transition history records older than this (0: keep them)")
	fl.IntVar(&cfg.HistoryRetention.MaxRecords, "history-max-records", 1_000_000, "keep at most this many transition history records, the newest (0: no limit)")

	// Datastore operations: scheduled snapshots.
	fl.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", 0, "take a datastore snapshot (muster-server datastore restore reads it) this often, e.g. 12h (0: never)")
	fl.StringVar(&cfg.SnapshotDir, "snapshot-dir", "", "directory of the scheduled snapshots, files mode 0600 (default: snapshots in --data-dir)")
	fl.IntVar(&cfg.SnapshotRetention, "snapshot-retention", 5, "how many scheduled snapshots to keep, the newest (in --snapshot-dir, and in --snapshot-s3-bucket)")
	s3Flags(fl, &cfg.SnapshotS3, "snapshot-s3-", true)

	cmd.AddCommand(newManifestsCommand(&cfg), newHistoryCommand(&cfg), newDatastoreCommand(&cfg), newKubeconfigCommand(&cfg), newTokenCommand(&cfg), newCertificateCommand(&cfg), newRegistrationCommand(&cfg), newConsoleTokenCommand(&cfg), version.Command("muster-server"))
	return cmd
}

func newKubeconfigCommand(cfg *server.Config) *cobra.Command {
	var output, userName string
	var groups []string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print or write the admin kubeconfig, or mint a user's",
		Long: `kubeconfig prints the admin kubeconfig of the server's data dir (--data-dir),
or, when --data-dir is not given and $KUBECONFIG is set, the credential
$KUBECONFIG selects, made self-contained. With --output FILE it writes FILE
(mode 0600) whole or not at all; a shell redirection would leave an empty
file behind if the command failed.

With --user NAME --group G it mints a client certificate for a person or a
tool from the CA in --data-dir (so only on the server's host) and prints a
kubeconfig holding it. Groups: system:masters (administrators),
muster:operators, muster:viewers, muster:metrics-readers (docs/security.md,
"Roles"). A certificate cannot be revoked before it expires: keep
--validity short for people.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b []byte
			var err error
			if userName != "" || len(groups) > 0 {
				if err := caller.CheckUser(userName, groups); err != nil {
					return err
				}
				b, err = bootstrap.UserKubeconfig(cfg.DataDir, userName, groups, validity)
				if err == nil {
					// A sentence for the person who ran it, not a log line.
					fmt.Fprintf(cmd.ErrOrStderr(), "kubeconfig for user %s in groups %s, valid until %s\n",
						userName, strings.Join(groups, ","), time.Now().Add(validity).UTC().Format(time.RFC3339))
				}
			} else {
				b, err = credential(cmd, cfg, "").Flatten()
			}
			if err != nil {
				return err
			}
			if output != "" {
				return kubeconfig.WriteFile(output, b)
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	cmd.Flags().StringVar(&output, "output", "", "write the kubeconfig to this file (mode 0600) instead of standard output")
	cmd.Flags().StringVar(&userName, "user", "", "mint a certificate for this user name (a person or a tool), from the CA in --data-dir")
	cmd.Flags().StringSliceVar(&groups, "group", nil, "with --user: the user's group (repeatable): muster:viewers, muster:operators, muster:metrics-readers or system:masters")
	cmd.Flags().DurationVar(&validity, "validity", 90*24*time.Hour, "with --user: how long the certificate is valid")
	return cmd
}

func newManifestsCommand(cfg *server.Config) *cobra.Command {
	cmd := groupCommand("manifests", "Print Kubernetes manifests for running muster with Kubernetes")
	a := manifests.Aggregated{}
	agg := &cobra.Command{
		Use:   "aggregated",
		Short: "Print the APIService, Service, endpoints and RBAC that put muster behind a kube-apiserver",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := datadir.New(cfg.DataDir)
			if err != nil {
				return err
			}
			if a.CA, err = os.ReadFile(files.CACert); err != nil {
				return fmt.Errorf("reading muster's CA: %w (run this on the server's host with its --data-dir)", err)
			}
			return a.Write(cmd.OutOrStdout())
		},
	}
	f := agg.Flags()
	f.StringVar(&a.Namespace, "namespace", "muster", "namespace of the Service")
	f.StringVar(&a.Service, "service", "muster-api", "name of the Service; muster's serving certificate must carry SERVICE.NAMESPACE.svc (--tls-san)")
	f.StringVar(&a.Address, "address", "", "IP address the kube-apiserver reaches muster on (not loopback)")
	f.IntVar(&a.Port, "port", 9443, "muster's --https-port")
	f.StringVar(&a.User, "user", "", "the user of muster's --authentication-kubeconfig, bound to system:auth-delegator and extension-apiserver-authentication-reader")
	cmd.AddCommand(agg)
	return cmd
}

// checkHostAgentFlags refuses a --host-agent-* flag without --with-agent,
// which would otherwise be silently ignored, and a port that is none.
func checkHostAgentFlags(cfg server.Config) error {
	h := cfg.HostAgent
	if !cfg.WithAgent && (h.Exec || h.Plans || len(h.AllowPorts) > 0) {
		return fmt.Errorf("--host-agent-exec, --host-agent-plans and --host-agent-allow-port apply to the agent --with-agent runs: add --with-agent, or drop them")
	}
	for _, p := range h.AllowPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("--host-agent-allow-port %d: a port is 1 to 65535", p)
		}
	}
	return nil
}

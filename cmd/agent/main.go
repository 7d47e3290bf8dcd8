// Command muster-agent joins a machine to a muster-server and runs its
// plans: flags here, everything else in internal/agent.
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"

	"github.com/muster-io/muster/internal/agent"
	"github.com/muster-io/muster/internal/logformat"
	"github.com/muster-io/muster/internal/version"
)

func main() {
	os.Exit(cli.Run(newRootCommand()))
}

func newRootCommand() *cobra.Command {
	cfg := agent.Config{Out: os.Stdout, OwnsKlog: true, SelfUpgrade: true}
	var labels []string
	var roleFlags struct{ etcd, controlplane, worker bool }
	hostname, _ := os.Hostname()
	dataDir := "muster-agent-data"
	if os.Geteuid() == 0 {
		dataDir = "/var/lib/muster/agent"
	}
	cmd := &cobra.Command{
		Use:          "muster-agent",
		Short:        "Join this machine to a muster-server and run the plans it is given",
		Version:      version.Version,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Labels = map[string]string{}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return fmt.Errorf("--label %q: expected key=value", l)
				}
				cfg.Labels[k] = v
			}
			if err := logformat.Check(cfg.LogFormat); err != nil {
				return err
			}
			if cfg.Server == "" {
				cfg.Server = os.Getenv("MUSTER_URL")
			}
			if cfg.Server == "" {
				return fmt.Errorf("--server (or $MUSTER_URL) is required, e.g. --server https://10.0.0.1:9443")
			}
			cfg.NodeName = strings.ToLower(cfg.NodeName)
			for _, p := range cfg.AllowPorts {
				if p < 1 || p > 65535 {
					return fmt.Errorf("--allow-port %d: a port is 1 to 65535", p)
				}
			}
			if cfg.KubeAPIPort < 0 || cfg.KubeAPIPort > 65535 {
				return fmt.Errorf("--kube-apiserver-port %d: a port is 1 to 65535, or 0 to refuse the server's proxy of the cluster's API", cfg.KubeAPIPort)
			}
			if cfg.Token != "" && cfg.TokenFile != "" {
				return fmt.Errorf("--token and --token-file both given: pass only --token-file")
			}
			if cfg.Token == "" && cfg.TokenFile == "" {
				cfg.Token, cfg.TokenFile = os.Getenv("MUSTER_TOKEN"), os.Getenv("MUSTER_TOKEN_FILE")
			}
			// Plan instructions inherit the agent's environment: the join
			// token must not reach them.
			_ = os.Unsetenv("MUSTER_TOKEN")
			cfg.TokenOnCommandLine = cmd.Flags().Changed("token")
			cfg.Args = os.Args
			for _, r := range []struct {
				on   bool
				role string
			}{{roleFlags.etcd, "etcd"}, {roleFlags.controlplane, "controlplane"}, {roleFlags.worker, "worker"}} {
				if r.on && !slices.Contains(cfg.Roles, r.role) {
					cfg.Roles = append(cfg.Roles, r.role)
				}
			}
			return agent.Run(agent.SignalContext(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "", "URL of a muster-server, e.g. https://10.0.0.1:9443")
	f.StringVar(&cfg.TokenFile, "token-file", "", "file holding the join token from 'muster-server token create' (needed only to join; also $MUSTER_TOKEN_FILE, or the token itself in $MUSTER_TOKEN)")
	f.StringVar(&cfg.Token, "token", "", "join token; visible to every local user in /proc/<pid>/cmdline: prefer --token-file or $MUSTER_TOKEN")
	f.StringVar(&cfg.NodeName, "node-name", hostname, "node name, lowercased; also the Machine's name")
	f.BoolVar(&cfg.WithNodeID, "with-node-id", false, "append a random id kept in the data dir to the node name")
	f.StringArrayVar(&labels, "label", nil, "label for the Machine, key=value (repeatable)")
	f.StringArrayVar(&cfg.Roles, "role", nil, "role of the machine, e.g. worker (repeatable)")
	// Rancher's registration command for custom machines spells the
	// planner's roles as flags; the same command works here.
	f.BoolVar(&roleFlags.etcd, "etcd", false, "role etcd (as --role etcd): an etcd member of a Cluster with spec.kubernetes")
	f.BoolVar(&roleFlags.controlplane, "controlplane", false, "role controlplane (as --role controlplane): kube-apiserver of a Cluster with spec.kubernetes, reached through the server's /k8s/clusters/NAME")
	f.BoolVar(&roleFlags.worker, "worker", false, "role worker (as --role worker): a worker of a Cluster with spec.kubernetes")
	f.StringVar(&cfg.DataDir, "data-dir", dataDir, "directory for the node password, identity and certificate")
	f.StringVar(&cfg.LogFormat, "log-format", "text", logformat.Usage)
	f.BoolVar(&cfg.DisableExec, "disable-exec", false, "refuse every exec the server relays (kubectl muster exec); the agent says so to whoever asked")
	f.DurationVar(&cfg.CACheckInterval, "ca-check-interval", agent.DefaultCACheckInterval, "how often to look for a rotated cluster CA on the server's /cacerts (muster-server certificate rotate-ca); a new one is stored and the certificate renewed under it")
	f.IntSliceVar(&cfg.AllowPorts, "allow-port", nil, "a port on this machine's loopback (127.0.0.1) that kubectl muster port-forward may reach through the server (repeatable; none by default)")
	f.IntVar(&cfg.KubeAPIPort, "kube-apiserver-port", 6443, "the port of this machine's kube-apiserver on its loopback (127.0.0.1), which the server's proxy of the cluster's API (/k8s/clusters/NAME) may reach through the tunnel when the machine has role controlplane; 0 refuses it. Never reachable by kubectl muster port-forward")
	f.BoolVar(&cfg.InsecureSkipCACheck, "insecure-skip-ca-check", false, "accept a token without a CA hash and do not verify the server (dangerous)")
	cmd.AddCommand(newSimulateCommand(), version.Command("muster-agent"))
	return cmd
}

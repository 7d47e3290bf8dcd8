package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/muster-io/muster/internal/agent"
	"github.com/muster-io/muster/internal/kubeconfig"
	"github.com/muster-io/muster/internal/simulate"
)

func newSimulateCommand() *cobra.Command {
	cfg := simulate.Config{}
	var tokenFile string
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Run many simulated agents in this process, to load-test a server",
		Long: `simulate joins --count agents to a server, each with its own node password,
key, certificate, TLS connection, plan watch and heartbeats, then keeps them
connected (plan reports) until interrupted. Each runs the real agent's
protocol code; plans are reported applied without running anything. It
rides through server restarts and reports what it saw: errors by kind and
the time to recover. Use a join token with --cluster to put them in
one cluster. With --plan-updates and an admin --kubeconfig it also changes
their plans at that rate and reports how long each change takes to be
applied.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Token == "" && tokenFile == "" {
				cfg.Token, tokenFile = os.Getenv("MUSTER_TOKEN"), os.Getenv("MUSTER_TOKEN_FILE")
			}
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("reading the join token: %w; check --token-file", err)
				}
				cfg.Token = strings.TrimSpace(string(b))
			}
			if cfg.Server == "" || cfg.Token == "" {
				return fmt.Errorf("--server and a join token (--token-file, $MUSTER_TOKEN or --token) are required")
			}
			if cfg.PlanUpdates > 0 && cfg.Kubeconfig == "" {
				// As kubectl: --kubeconfig, else $KUBECONFIG (its first file).
				if src := (kubeconfig.Lookup{}).Find(); src.From == "$"+kubeconfig.EnvVar {
					cfg.Kubeconfig = src.Paths[0]
				} else {
					return fmt.Errorf("--plan-updates needs an admin credential to change plans with: pass --kubeconfig FILE or set $KUBECONFIG ('muster-server kubeconfig --output FILE' writes one)")
				}
			}
			return simulate.Run(agent.SignalContext(), cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "", "URL of a muster-server, e.g. https://10.0.0.1:9443")
	f.StringVar(&tokenFile, "token-file", "", "file holding a join token from 'muster-server token create' (also $MUSTER_TOKEN_FILE, or the token in $MUSTER_TOKEN)")
	f.StringVar(&cfg.Token, "token", "", "join token; visible in /proc/<pid>/cmdline: prefer --token-file or $MUSTER_TOKEN")
	f.IntVar(&cfg.Count, "count", 100, "how many agents to simulate")
	f.IntVar(&cfg.Concurrency, "concurrency", 50, "how many agents join at the same moment")
	f.StringVar(&cfg.Prefix, "prefix", "sim", "node names are <prefix>-<n>")
	f.Float64Var(&cfg.PlanUpdates, "plan-updates", 0, "plan changes a second, round robin over the simulated machines, once they have joined (needs --kubeconfig)")
	f.BoolVar(&cfg.NoTunnels, "no-tunnels", false, "do not hold the agents' tunnels (real agents do), to measure what they cost")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "admin kubeconfig to change plans with (default $KUBECONFIG; muster-server kubeconfig --output FILE writes one)")
	return cmd
}

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/muster-io/muster/internal/simulate"
)

func newSimulateCommand() *cobra.Command {
	cfg := simulate.Config{}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Run many simulated agents in this process, to load-test a server",
		Long: `simulate joins --count agents to a server, each with its own node password,
key, certificate, TLS connection and plan watch, then keeps them connected
(heartbeats, plan reports) until interrupted. Plans are reported applied
without running anything. Use a join token with --cluster to put them in
one cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Server == "" || cfg.Token == "" {
				return fmt.Errorf("--server and --token are required")
			}
			ctx := genericapiserver.SetupSignalContext()
			return runSimulate(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "", "URL of a muster-server, e.g. https://10.0.0.1:9443")
	f.StringVar(&cfg.Token, "token", "", "join token from 'muster-server token create'")
	f.IntVar(&cfg.Count, "count", 100, "how many agents to simulate")
	f.IntVar(&cfg.Concurrency, "concurrency", 50, "how many agents join at the same moment")
	f.StringVar(&cfg.Prefix, "prefix", "sim", "node names are <prefix>-<n>")
	return cmd
}

func runSimulate(ctx context.Context, cfg simulate.Config) error {
	fleet, err := simulate.New(ctx, cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	last := time.Now()
	err = fleet.Join(ctx, func(n int) {
		if time.Since(last) >= 2*time.Second || n == cfg.Count {
			last = time.Now()
			el := time.Since(start).Seconds()
			fmt.Fprintf(os.Stdout, "simulate: joined %d/%d in %.1fs (%.0f/s), %d connected\n", n, cfg.Count, el, float64(n)/el, fleet.Connected())
		}
	})
	if err != nil {
		fmt.Fprintf(os.Stdout, "simulate: some agents did not join: %v\n", err)
	}
	lat := fleet.JoinLatencies()
	if len(lat) > 0 {
		fmt.Fprintf(os.Stdout, "simulate: join latency p50 %s, p99 %s, max %s\n",
			lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fleet.StopAll()
			return nil
		case <-t.C:
			fmt.Fprintf(os.Stdout, "simulate: %d connected, %d plans reported applied\n", fleet.Connected(), fleet.Applied())
		}
	}
}

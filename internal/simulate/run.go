package simulate

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// Run is `muster-agent simulate`: it joins the fleet, printing progress
// every 2 s and the join latencies at the end, then keeps the agents
// connected until ctx ends, changing plans at cfg.PlanUpdates a second if
// asked, and prints a summary every 10 s.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	// Each simulated agent's plan watch is client-go's, which logs every
	// broken watch: a thousand lines per server restart. The fleet's own
	// account (lost the server, back after, errors by kind) replaces them.
	klog.SetLogger(logr.Discard())
	var admin musterclient.MusterV1alpha1Interface
	if cfg.PlanUpdates > 0 {
		if cfg.Kubeconfig == "" {
			return fmt.Errorf("--plan-updates needs --kubeconfig: an admin kubeconfig to change plans with (muster-server kubeconfig)")
		}
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		rc.QPS, rc.Burst = -1, 0 // the rate is --plan-updates'
		if admin, err = musterclient.NewForConfig(rc); err != nil {
			return err
		}
	}
	fleet, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	fleet.health.say = func(format string, args ...interface{}) {
		fmt.Fprintf(out, "simulate: "+format+"\n", args...)
	}
	start, last := time.Now(), time.Now()
	err = fleet.Join(ctx, func(n int) {
		if time.Since(last) >= 2*time.Second || n == cfg.Count {
			last = time.Now()
			el := time.Since(start).Seconds()
			fmt.Fprintf(out, "simulate: joined %d/%d in %.1fs (%.0f/s), %d connected\n", n, cfg.Count, el, float64(n)/el, fleet.Connected())
		}
	})
	if err != nil {
		fmt.Fprintf(out, "simulate: some agents did not join: %v\n", err)
	}
	if lat := fleet.JoinLatencies(); len(lat) > 0 {
		fmt.Fprintf(out, "simulate: join latency p50 %s, p99 %s, max %s\n",
			percentile(lat, 50).Round(time.Millisecond), percentile(lat, 99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
	planErr := make(chan error, 1)
	go func() { planErr <- fleet.ChangePlans(ctx, admin, cfg.PlanUpdates) }()
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fleet.StopAll()
			fmt.Fprintf(out, "simulate: stopped; %s\n", summary(fleet))
			return nil
		case err := <-planErr:
			if err != nil {
				fleet.StopAll()
				return err
			}
		case <-t.C:
			fmt.Fprintf(out, "simulate: %s\n", summary(fleet))
		}
	}
}

// summary is the fleet's state, its plan latencies and what it saw of the server.
func summary(fleet *Fleet) string {
	line := fmt.Sprintf("%d connected, %d plans reported applied", fleet.Connected(), fleet.Applied())
	if done, waiting := fleet.PlanLatencies(); len(done) > 0 {
		line += fmt.Sprintf("; plan change → applied p50 %s, p99 %s over %d changes, %d waiting",
			percentile(done, 50).Round(time.Millisecond), percentile(done, 99).Round(time.Millisecond), len(done), waiting)
	}
	return line + "; " + fleet.Health().String()
}

// percentile of sorted durations, p in 0..100.
func percentile(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

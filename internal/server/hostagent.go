package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/agent"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// hostAgentTokenTTL bounds the join token a server mints for its own host:
// single use, and dead soon after if the join never happens.
const hostAgentTokenTTL = 10 * time.Minute

// runHostAgent runs the agent of the server's own host in this process
// (--with-agent), as a k3s server runs an agent beside its control plane:
// the host joins like any other machine, with a single-use token the server
// mints for it, and its data dir (<data-dir>/agent) keeps its certificate
// across restarts, so it never re-registers.
func runHostAgent(ctx context.Context, cfg Config, loopback *rest.Config, serverURL string) {
	dir := filepath.Join(cfg.DataDir, "agent")
	acfg := agent.Config{Server: serverURL, DataDir: dir, Out: &prefixWriter{prefix: "host agent: ", w: os.Stderr}, LogFormat: "text"}
	acfg.NodeName, _ = os.Hostname()
	acfg.NodeName = strings.ToLower(acfg.NodeName)
	if !agent.Joined(dir) {
		tok, err := mintHostToken(ctx, loopback)
		if err != nil {
			klog.ErrorS(err, "The host agent cannot join: restart muster-server to try again, or join this host with muster-agent and a token")
			return
		}
		acfg.Token = tok
	}
	if err := agent.Run(ctx, acfg); err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "The host agent stopped; restart muster-server to run it again")
	}
}

func mintHostToken(ctx context.Context, loopback *rest.Config) (string, error) {
	client, err := versioned.NewForConfig(loopback)
	if err != nil {
		return "", err
	}
	var lastErr error
	for attempt := 0; attempt < 30; attempt++ {
		tok, err := jointoken.Create(ctx, client.MusterV1alpha1(), jointoken.CreateOptions{
			TTL: hostAgentTokenTTL, MaxUses: 1, Description: "muster-server --with-agent: this server's own host",
		})
		if err == nil {
			return tok.String(), nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return "", fmt.Errorf("minting a join token for this server's own host: %w", lastErr)
}

// prefixWriter marks the host agent's lines in the server's log.
type prefixWriter struct {
	prefix string
	w      *os.File
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) > 0 {
			out.WriteString(p.prefix)
			out.Write(line)
		}
	}
	if _, err := p.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}

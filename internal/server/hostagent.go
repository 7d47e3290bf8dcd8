package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
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

// HostAgentAbilities are what the agent inside muster-server (--with-agent)
// lets operators do on the server's own host. That agent runs as the
// server's user, with the server's data dir (its CA key, its admin
// kubeconfig) in reach, so each ability makes every operator root on this
// host and admin of Muster: none is on unless an admin turns it on with
// muster-server's flags (docs/security.md, "The server's own host").
type HostAgentAbilities struct {
	// Exec lets `kubectl muster exec` run commands (--host-agent-exec).
	Exec bool
	// Plans lets the host's MachinePlan write files, run instructions and
	// probes (--host-agent-plans). Without it, only an empty plan succeeds.
	Plans bool
	// AllowPorts are the loopback ports `kubectl muster port-forward` may
	// reach on this host (--host-agent-allow-port); none by default.
	AllowPorts []int
}

// The refusals of the host's agent, in words that say why and which flag
// an admin sets to allow it.
const (
	hostExecRefusal = "exec is disabled on this machine: its agent runs inside muster-server (--with-agent), " +
		"where a command would run as the server's user with the server's data dir and CA key in reach; " +
		"an admin allows it by restarting muster-server with --host-agent-exec, which makes every operator root on this host"
	hostPlansRefusal = "this machine's agent runs inside muster-server (--with-agent) and carries out no plan that writes files " +
		"or runs instructions or probes unless an admin restarts muster-server with --host-agent-plans: they would run as the " +
		"server's user with its data dir and CA key in reach (so that flag makes every operator root on this host); " +
		"leave this machine out of the plan set's selector"
	hostPortsFlag = "muster-server --host-agent-allow-port"
)

// agentConfig is the configuration of the host's agent: the abilities an
// admin allowed, and the refusals of the rest.
func (h HostAgentAbilities) agentConfig(acfg agent.Config) agent.Config {
	acfg.DisableExec = !h.Exec
	if acfg.DisableExec {
		acfg.ExecRefusal = hostExecRefusal
	}
	if !h.Plans {
		acfg.RefusePlans = hostPlansRefusal
	}
	acfg.AllowPorts, acfg.PortsFlag = h.AllowPorts, hostPortsFlag
	// The server's own host is never reached as a cluster's control plane
	// (the proxy of a cluster's API, /k8s/clusters/): operators would
	// reach whatever listens there with the cluster's credential.
	acfg.KubeAPIPort = 0
	return acfg
}

// runHostAgent runs the agent of the server's own host in this process
// (--with-agent), as a k3s server runs an agent beside its control plane:
// the host joins like any other machine, with a single-use token the server
// mints for it, and its data dir (<data-dir>/agent) keeps its certificate
// across restarts, so it never re-registers.
func runHostAgent(ctx context.Context, cfg Config, dir string, loopback *rest.Config, serverURL string) {
	acfg := cfg.HostAgent.agentConfig(agent.Config{Server: serverURL, DataDir: dir, Out: &prefixWriter{prefix: "host agent: ", w: os.Stderr}, LogFormat: "text"})
	// Its own server is no place to go through the server's HTTPS_PROXY
	// (set for S3): it connects directly.
	acfg.IgnoreProxy = true
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

// Package agent is muster-agent: it joins a server with a join token (CA
// pinned by the token, node password, registration request), pivots to the
// client certificate it is granted, and from then on uses only that.
package agent

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/agent/loadbalancer"
	"github.com/muster-io/muster/internal/forwardproxy"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/logformat"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/tunnel"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// Config is muster-agent's configuration, one field per flag.
type Config struct {
	Server string
	// Token is the join token itself (--token or $MUSTER_TOKEN); TokenFile
	// names a file holding it (--token-file or $MUSTER_TOKEN_FILE), which
	// keeps it off the command line.
	Token               string
	TokenFile           string
	NodeName            string
	WithNodeID          bool
	Labels              map[string]string
	Roles               []string
	DataDir             string
	InsecureSkipCACheck bool
	// TokenOnCommandLine says the token came from --token, which the
	// agent warns about.
	TokenOnCommandLine bool
	// Out receives the agent's account of each step.
	Out io.Writer
	// LogFormat is "text" (timestamped lines) or "json" (one JSON object
	// a line, as muster-server writes with --log-format json).
	LogFormat string
	// OwnsKlog routes klog (client-go's lines) into the agent's output. The
	// muster-agent binary sets it; a muster-server running its host's agent
	// in-process (--with-agent) keeps klog for its own log.
	OwnsKlog bool
	// DisableExec refuses the execs the server relays through the tunnel.
	DisableExec bool
	// ExecRefusal, if set, is why exec is disabled, in place of the words
	// for --disable-exec (muster-server --with-agent names its own flag).
	ExecRefusal string
	// AllowPorts are the loopback ports port-forwards may reach.
	AllowPorts []int
	// PortsFlag names the flag that publishes ports, for a refused
	// port-forward; "--allow-port" when empty.
	PortsFlag string
	// KubeAPIPort is the kube-apiserver's loopback port the server's
	// proxy of the cluster's API may reach; zero refuses it.
	KubeAPIPort int
	// RefusePlans, if set, is why this agent carries out no plan that
	// would run or write anything (files, instructions, probes, an agent
	// upgrade): such a plan is reported failed, with this as its output.
	// The agent inside muster-server sets it unless an admin allows plans
	// there (--host-agent-plans), since whatever a plan runs there runs as
	// the server's user.
	RefusePlans string
	// SelfUpgrade says the process is the muster-agent binary, which may
	// replace its executable for a plan's agentUpgrade (upgrade.go); an
	// agent inside muster-server (--with-agent) must not.
	SelfUpgrade bool
	// CACheckInterval is how often the agent reads the server's /cacerts
	// (verified against the CA it holds) to notice a CA rotation: a new
	// bundle is stored and the certificate renewed under the new CA at
	// once. Zero means DefaultCACheckInterval.
	CACheckInterval time.Duration
	// IgnoreProxy connects to servers directly whatever HTTPS_PROXY says:
	// the agent inside muster-server (--with-agent) talks to its own
	// server, and the server's proxy variables are for its S3 calls.
	IgnoreProxy bool
	// Args is the agent's command line, to print the command that joins
	// again once the Machine is deleted; nil prints a generic one.
	Args []string
}

// Run joins if needed, then stays running until ctx ends. It returns an
// error when the agent's Machine is deleted while it runs: its certificate
// is void from then on, and only a new join token brings it back.
func Run(ctx context.Context, cfg Config) error {
	// The agent's recent lines, for `kubectl muster logs`; whatever it
	// writes goes there too.
	ring := tunnel.NewRing(logRingBytes)
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	cfg.Out = io.MultiWriter(cfg.Out, ring)
	a := &agent{cfg: cfg, dir: dataDir(cfg.DataDir), gone: make(chan error, 1), ring: ring, reconnected: make(chan struct{}, 1)}
	if cfg.LogFormat == "json" {
		l := logformat.JSON(cfg.Out).WithCallDepth(1)
		a.json = &l
	}
	err := a.run(ctx)
	if err != nil && ctx.Err() == nil {
		a.upgradeStopped(err) // upgrade.go: a new agent that cannot run puts the previous one back
	}
	if ctx.Err() != nil {
		// SIGTERM or SIGINT: a stop asked for is a clean stop (exit 0),
		// and the last line says it happened, whatever the agent was doing.
		a.say("stopped by a signal (SIGTERM or SIGINT)")
		return nil
	}
	return err
}

func (a *agent) run(ctx context.Context) error {
	cfg := a.cfg
	unlock, err := a.dir.lock()
	if err != nil {
		return err
	}
	defer unlock()
	a.resumeUpgrade(ctx) // upgrade.go
	// client-go logs through klog (a watch ending, a retried request):
	// those lines take the agent's format too, so every line has the same
	// timestamp and prefix.
	if cfg.OwnsKlog {
		klog.SetLogger(logr.New(&sayLogger{say: a.say}))
	}
	if err := checkServerURL(cfg.Server); err != nil {
		return err
	}
	// Every connection to a server goes through this dialer: a proxy
	// variable that is no URL stops the agent here, not in a retry loop.
	dial, err := forwardproxy.FromEnvironment()
	if cfg.IgnoreProxy {
		dial, err = forwardproxy.Direct(), nil
	}
	if err != nil {
		return fmt.Errorf("the proxy settings: %w", err)
	}
	a.dial = dial
	if dial.Configured() {
		a.say("%s", dial.Describe())
	}
	if cfg.TokenOnCommandLine {
		a.say("WARNING: --token is readable by every local user in /proc/%d/cmdline while the agent runs; "+
			"use --token-file FILE or $MUSTER_TOKEN instead", os.Getpid())
	}
	a.removeStaleToken()
	machine, err := a.credential(ctx)
	if err != nil {
		return err
	}
	if err := a.startLoadBalancer(ctx); err != nil {
		return err
	}
	a.say("running as machine %s; waiting for work", machine)
	for ctx.Err() == nil {
		// The workers use a client made from the current certificate; after
		// a renewal they start again with the new one.
		wctx, stop := context.WithCancel(ctx)
		c, err := a.client()
		if err == nil {
			go a.heartbeat(wctx, c, machine)
			go a.runPlans(wctx, c, machine)
			// The tunnel rides on this session's connection; after a
			// renewal it is opened again with the new certificate.
			go a.tunnel(wctx, c)
		}
		renewed := make(chan struct{})
		go func() {
			defer close(renewed)
			a.renewWhenDue(wctx)
		}()
		select {
		case <-renewed:
		case reason := <-a.gone:
			stop()
			<-renewed
			if c != nil {
				c.close()
			}
			// Lost with a restore of the server's datastore, the
			// Machine is made again; deleted, it is not, and the agent stops.
			if err := a.rejoin(ctx, machine); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return a.goneError(machine, fmt.Errorf("%v; rejoining with its certificate and node password: %v", reason, err))
			}
			select {
			case <-a.gone: // the old certificate's refusal, seen twice
			default:
			}
			continue
		}
		stop()
		if c != nil {
			c.close()
		}
	}
	return nil
}

type agent struct {
	cfg Config
	dir dataDir
	// lb carries every certificate-authenticated connection once the
	// agent holds a certificate.
	lb *loadbalancer.LoadBalancer
	// dial opens every connection to a server: directly, or through the
	// proxy HTTPS_PROXY names (internal/forwardproxy).
	dial *forwardproxy.Dialer
	// gone receives why the server no longer accepts this machine's
	// certificate (its Machine was deleted), once that is certain.
	gone chan error
	// json, when set, writes the agent's lines as JSON objects.
	json *logr.Logger
	// ring keeps the agent's recent lines for `kubectl muster logs`.
	ring *tunnel.Ring
	// upgrade is the state of an agent upgrade (upgrade.go).
	upgrade *upgradeState
	// reconnected tells the plan runner the server answers again after
	// it was lost (liveness.go).
	reconnected chan struct{}
}

// dialer is the agent's dialer; direct until run has read the environment.
func (a *agent) dialer() *forwardproxy.Dialer {
	if a.dial == nil {
		return forwardproxy.Direct()
	}
	return a.dial
}

// logRingBytes bounds the log the agent keeps in memory to serve.
const logRingBytes = 256 << 10

// tunnel holds the agent's tunnel to the server on c's connection until
// ctx ends (internal/tunnel), serving what the agent's flags allow.
func (a *agent) tunnel(ctx context.Context, c *session) {
	RunTunnel(ctx, c.http, c.host, tunnel.Policy{DisableExec: a.cfg.DisableExec, ExecRefusal: a.cfg.ExecRefusal, AllowPorts: a.cfg.AllowPorts, PortsFlag: a.cfg.PortsFlag, KubeAPIPort: a.cfg.KubeAPIPort, Log: a.ring}, a.say)
}

// RunTunnel is the agent's tunnel, shared with `muster-agent simulate`:
// hc and host are a certificate-authenticated session's client and base URL.
func RunTunnel(ctx context.Context, hc *http.Client, host string, policy tunnel.Policy, say func(format string, args ...interface{})) {
	(&tunnel.Client{Policy: policy, Say: say}).Run(ctx, hc, host)
}

// say writes one line of the agent's account, timestamped: an operator
// lines it up with the server's log to see what happened when.
func (a *agent) say(format string, args ...interface{}) {
	if a.json != nil {
		a.json.Info(fmt.Sprintf(format, args...))
		return
	}
	fmt.Fprintf(a.cfg.Out, "%s muster-agent: "+format+"\n",
		append([]interface{}{time.Now().UTC().Format("2006-01-02T15:04:05.000Z")}, args...)...)
}

// machineGone reports that the server refuses this machine's certificate
// for good; Run ends the agent with the reason.
func (a *agent) machineGone(reason error) {
	select {
	case a.gone <- reason:
	default:
	}
}

// goneError is the agent's last word when its Machine was deleted: what
// happened and the command that joins this machine again.
func (a *agent) goneError(machine string, reason error) error {
	return fmt.Errorf("the server no longer accepts the certificate of machine %s (%v): "+
		"its Machine was deleted, its certificate expired, or the server's datastore was restored from a snapshot taken before this machine joined, "+
		"so this agent stops. To join again, create a join token (or reuse one still valid) "+
		"on the server ('muster-server token create'), write it to a file only this user can read, and run: %s",
		machine, reason, rejoinCommand(a.cfg.Args, a.cfg.DataDir))
}

// rejoinCommand is the agent's own command line with the join token
// replaced by --token-file (never the token itself).
func rejoinCommand(args []string, dataDir string) string {
	if len(args) == 0 {
		return fmt.Sprintf("muster-agent --data-dir %s --token-file /path/to/token", dataDir)
	}
	out := []string{args[0]}
	for i := 1; i < len(args); i++ {
		arg := args[i]
		name, _, hasValue := strings.Cut(arg, "=")
		if name == "--token" || name == "--token-file" {
			if !hasValue {
				i++ // its value is the next argument
			}
			continue
		}
		out = append(out, arg)
	}
	return strings.Join(append(out, "--token-file", "/path/to/token"), " ")
}

// removeStaleToken deletes a join token an older agent kept in the data
// dir: a token is read from --token, --token-file or $MUSTER_TOKEN and
// never written here, so a failed join cannot leave one to be reused.
func (a *agent) removeStaleToken() {
	stale := a.dir.path(tokenFile)
	if a.cfg.TokenFile != "" {
		if given, err := filepath.Abs(a.cfg.TokenFile); err == nil {
			if abs, err := filepath.Abs(stale); err == nil && abs == given {
				return // the operator's own --token-file, not a leftover
			}
		}
	}
	if err := os.Remove(stale); err == nil {
		a.say("removed a join token left in %s by an earlier join; a join token is read only from --token-file, $MUSTER_TOKEN or --token", a.dir.path(tokenFile))
	}
}

// credential returns the machine name once the agent holds a working
// certificate: the stored one, or a new one from joining.
func (a *agent) credential(ctx context.Context) (string, error) {
	id, err := a.dir.credentials(a.cfg.NodeName, a.cfg.WithNodeID)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(a.dir.path(certFile)); err == nil {
		// Through the load balancer, so that a restart finds the servers
		// it learned even when --server is down.
		if err := a.startLoadBalancer(ctx); err != nil {
			return "", err
		}
		machine, m, err := a.checkCertificate(ctx)
		if err == nil {
			a.say("using the stored certificate of machine %s (no re-registration)", machine)
			a.warnDrift(id, m)
			return machine, nil
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
			return "", fmt.Errorf("checking the stored certificate: %w", err)
		}
		a.say("the server refuses this machine's certificate: %v", err)
		rerr := a.rejoin(ctx, machine)
		if rerr == nil {
			return machine, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		a.say("rejoining with the certificate was refused: %v", rerr)
		if !a.hasToken() {
			return "", fmt.Errorf("this machine's certificate is no longer valid (was the Machine deleted?) and the server refused to make its Machine again (%v): "+
				"create a join token on the server ('muster-server token create') and run: %s",
				rerr, rejoinCommand(a.cfg.Args, a.cfg.DataDir))
		}
	}
	backoff := time.Second
	for tries := 1; ; tries++ {
		machine, err := a.join(ctx, id)
		if err == nil {
			return machine, nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return "", fatal.err
		}
		if !transient(err) {
			// A 4xx other than 401/403/429 says the request itself is wrong;
			// sending it again cannot help.
			return "", fmt.Errorf("joining: %w", err)
		}
		wait := retryWait(err, backoff)
		a.say("joining failed: %v; retrying in %s", err, wait.Round(time.Millisecond))
		var status apierrors.APIStatus
		if hint := portHint(a.cfg.Server); hint != "" && tries%10 == 3 && !errors.As(err, &status) {
			// Unreachable, not refused: likely the wrong port.
			a.say("%s", hint)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, time.Minute)
	}
}

// rejoin asks the server, with the certificate it no longer accepts and the
// node password, to make this machine's Machine again. The server grants
// it only when its datastore was restored from a snapshot taken before the
// certificate was issued (internal/rejoin), once per certificate; a
// Machine an operator deleted stays deleted. Nothing else changes: the
// same name, node password, clientID and data dir.
func (a *agent) rejoin(ctx context.Context, machine string) error {
	id, err := a.dir.credentials(a.cfg.NodeName, a.cfg.WithNodeID)
	if err != nil {
		return err
	}
	id.nodeName = machine // the certificate's, whatever --node-name says now
	a.say("asking the server to make machine %s again with its certificate and node password (its datastore may have been restored from a snapshot taken before this machine joined)", machine)
	backoff := time.Second
	for {
		c, err := a.client()
		if err != nil {
			return err
		}
		granted, keyPEM, err := a.request(ctx, c, id)
		c.close()
		if err == nil {
			// Key before certificate, as a renewal writes them.
			if err := a.dir.write(keyFile, keyPEM); err != nil {
				return fmt.Errorf("storing %s: %w", keyFile, err)
			}
			if err := a.dir.write(certFile, granted.Status.Certificate); err != nil {
				return fmt.Errorf("storing %s: %w", certFile, err)
			}
			a.say("rejoined as machine %s (cluster %s) with the same node password: the server's datastore had lost its Machine", granted.Status.Machine, granted.Status.Cluster)
			return nil
		}
		var refusal *fatalError
		if errors.As(err, &refusal) || !transient(err) || ctx.Err() != nil {
			return err
		}
		wait := retryWait(err, backoff)
		a.say("rejoining failed: %v; retrying in %s", err, wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// fatalError is a join failure that retrying cannot fix.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

func fatal(format string, args ...interface{}) error {
	return &fatalError{fmt.Errorf(format, args...)}
}

func (a *agent) hasToken() bool { return a.cfg.Token != "" || a.cfg.TokenFile != "" }

// token is the join token from --token / $MUSTER_TOKEN, or read from
// --token-file / $MUSTER_TOKEN_FILE.
func (a *agent) token() (string, error) {
	if a.cfg.Token != "" {
		return a.cfg.Token, nil
	}
	if a.cfg.TokenFile == "" {
		return "", fmt.Errorf("no join token: pass --token-file FILE or set MUSTER_TOKEN (a token from 'muster-server token create')")
	}
	b, err := os.ReadFile(a.cfg.TokenFile)
	if err != nil {
		return "", fmt.Errorf("reading the join token: %w; check --token-file", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("--token-file %s is empty: write a token from 'muster-server token create' into it", a.cfg.TokenFile)
	}
	return t, nil
}

func (a *agent) join(ctx context.Context, id nodeCredentials) (string, error) {
	raw, err := a.token()
	if err != nil {
		return "", fatal("%v", err)
	}
	tok, err := jointoken.Parse(raw)
	if err != nil {
		return "", fatal("%v", err)
	}

	ca, err := PinCA(ctx, a.cfg.Server, tok, a.cfg.InsecureSkipCACheck, a.dialer().DialContext, a.say)
	if err != nil {
		return "", err
	}

	bootstrap, err := musterclient.NewForConfig(&rest.Config{
		Host: a.cfg.Server, BearerToken: tok.Bearer(), TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		// Through the proxy (if any) by the agent's own dialer, and only
		// by it: client-go's default Proxy would be a second opinion.
		Dial: a.dialer().DialContext, Proxy: forwardproxy.NoProxy,
	})
	if err != nil {
		return "", err
	}
	granted, keyPEM, err := a.request(ctx, bootstrap, id)
	var refusal *fatalError
	if errors.As(err, &refusal) && apierrors.IsUnauthorized(refusal.err) {
		// 401 to a join token: its id is unknown or its secret wrong
		// (which of the two, the server does not say).
		return "", fatal("the server does not know this join token, id %s (check it, or create a new one with 'muster-server token create')", tok.ID)
	}
	if err != nil {
		return "", err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{caFile, ca}, {keyFile, keyPEM}, {certFile, granted.Status.Certificate}, {serverFile, []byte(a.cfg.Server + "\n")}} {
		if err := a.dir.write(f.name, f.data); err != nil {
			return "", fatal("storing %s: %v", f.name, err)
		}
	}
	// The bootstrap credential has done its job; only the certificate is
	// used from now on, and the token was never written to the data dir.
	a.say("stored the certificate of machine %s (cluster %s); the join token is no longer needed", granted.Status.Machine, granted.Status.Cluster)
	return granted.Status.Machine, nil
}

// request asks for a certificate for this machine: with the join token
// when joining, with the current certificate when renewing.
func (a *agent) request(ctx context.Context, c musterclient.MusterV1alpha1Interface, id nodeCredentials) (*api.ClusterRegistration, []byte, error) {
	return Register(ctx, c, Registration{
		NodeName: id.nodeName, ClientID: id.clientID, NodePassword: id.nodePassword,
		Labels: a.cfg.Labels, Roles: a.cfg.Roles, Addresses: addresses(),
	}, a.say)
}

// renewWhenDue waits until two thirds of the certificate's life and renews
// it, with the certificate itself as the credential; it returns once it has
// renewed, or when ctx ends.
func (a *agent) renewWhenDue(ctx context.Context) {
	id, err := a.dir.credentials(a.cfg.NodeName, a.cfg.WithNodeID)
	if err != nil {
		a.say("cannot renew the certificate: %v", err)
		<-ctx.Done()
		return
	}
	retry := time.Second
	// pending is set once a renewal is due (or the CA bundle changed): a
	// failed one is tried again after its wait, not after the next change
	// of the bundle, which was stored already and will not change again.
	pending := false
	for {
		cert, err := a.certificate()
		if err == nil {
			// A renewal is for the machine the certificate names, whatever
			// --node-name says now (warnDrift told the operator).
			id.nodeName = strings.TrimPrefix(cert.Subject.CommonName, "muster:machine:")
		}
		if err != nil {
			a.say("cannot read the certificate to renew it: %v", err)
			<-ctx.Done()
			return
		}
		// Two thirds of the way from when the certificate was stored to
		// its expiry: NotBefore is backdated for clock skew, so it would
		// put the renewal too early.
		stored := time.Now()
		if fi, err := os.Stat(a.dir.path(certFile)); err == nil {
			stored = fi.ModTime()
		}
		due := stored.Add(cert.NotAfter.Sub(stored) * 2 / 3)
		if !pending && !a.waitForRenewal(ctx, due) {
			return
		}
		pending = true
		c, err := a.client()
		if err == nil {
			var granted *api.ClusterRegistration
			var keyPEM []byte
			granted, keyPEM, err = a.request(ctx, c, id)
			c.close()
			if err == nil {
				// Key before certificate: a crash in between leaves a
				// mismatched pair, which the next start detects and rejoins from.
				if err = a.dir.write(keyFile, keyPEM); err == nil {
					err = a.dir.write(certFile, granted.Status.Certificate)
				}
			}
		}
		var fatalErr *fatalError
		if errors.As(err, &fatalErr) && refused(fatalErr.err) && ctx.Err() == nil {
			// 401/403 to a renewal: the server no longer accepts this
			// certificate; retrying cannot change that.
			a.machineGone(fatalErr.err)
			<-ctx.Done()
			return
		}
		if err != nil {
			wait := retryWait(err, retry)
			a.say("renewing the certificate failed: %v; retrying in %s", err, wait.Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			retry = min(retry*2, 5*time.Minute)
			continue
		}
		renewed, _ := a.certificate()
		a.say("renewed the certificate; it is valid until %s", renewed.NotAfter.UTC().Format(time.RFC3339))
		return
	}
}

// DefaultCACheckInterval is how often an agent looks for a rotated CA.
const DefaultCACheckInterval = time.Minute

// waitForRenewal waits until due, or until the server's CA bundle changed
// (a CA rotation, or its end), whichever comes first; false when ctx ended.
func (a *agent) waitForRenewal(ctx context.Context, due time.Time) bool {
	interval := a.cfg.CACheckInterval
	if interval <= 0 {
		interval = DefaultCACheckInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	timer := time.NewTimer(time.Until(due))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-tick.C:
			if a.refreshCA(ctx) {
				return true
			}
		}
	}
}

// refreshCA reads /cacerts over a connection verified against the CA the
// agent holds, and stores the answer if it differs: after a CA rotation it
// holds the new CA beside the old (the server still presents a certificate
// of the old), after the rotation's end only the new one (which the stored
// bundle already trusts). It reports whether the bundle changed, so that
// the certificate is renewed under the CA that signs now.
func (a *agent) refreshCA(ctx context.Context) bool {
	c, err := a.client()
	if err != nil {
		return false
	}
	defer c.close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.host+"/cacerts", nil)
	if err != nil {
		return false
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	bundle, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	have, err := os.ReadFile(a.dir.path(caFile))
	if err != nil || bytes.Equal(have, bundle) {
		return false
	}
	if certs, err := pki.ParseCertsPEM(bundle); err != nil || len(certs) == 0 {
		a.say("the server's /cacerts holds no CA certificate (%v); keeping the CA in %s", err, a.dir.path(caFile))
		return false
	}
	if err := a.dir.write(caFile, bundle); err != nil {
		a.say("storing the server's new CA bundle: %v", err)
		return false
	}
	a.say("the server's CA bundle changed (sha256 %s): stored it; renewing the certificate under the CA that signs now", pki.Hash(bundle))
	return true
}

func (a *agent) certificate() (*x509.Certificate, error) {
	b, err := os.ReadFile(a.dir.path(certFile))
	if err != nil {
		return nil, err
	}
	certs, err := pki.ParseCertsPEM(b)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no certificate: %v", a.dir.path(certFile), err)
	}
	return certs[0], nil
}

// checkCertificate reads the agent's own Machine with its certificate. A
// server that is down, restarting or busy is waited for: only its answer
// (the Machine, or a 401/403) decides whether the certificate still works.
func (a *agent) checkCertificate(ctx context.Context) (string, *api.Machine, error) {
	c, err := a.client()
	if err != nil {
		return "", nil, err
	}
	defer c.close()
	cert, err := a.certificate()
	if err != nil {
		return "", nil, err
	}
	name := strings.TrimPrefix(cert.Subject.CommonName, "muster:machine:")
	backoff := time.Second
	for {
		m, err := c.Machines().Get(ctx, name, metav1.GetOptions{})
		if err == nil || refused(err) || ctx.Err() != nil || !transient(err) {
			return name, m, err
		}
		wait := retryWait(err, backoff)
		a.say("checking the stored certificate: %v; retrying in %s", err, wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return name, nil, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// warnDrift says when the flags ask for something other than what the
// machine registered with: a restart with the stored certificate changes
// neither its name nor its labels or roles, and silently ignoring the
// flags would leave the operator believing it did.
func (a *agent) warnDrift(id nodeCredentials, m *api.Machine) {
	if m == nil {
		return
	}
	for _, d := range drift(id.nodeName, a.cfg.Labels, a.cfg.Roles, m) {
		a.say("WARNING: %s", d)
	}
}

func drift(nodeName string, labels map[string]string, roles []string, m *api.Machine) []string {
	var out []string
	if nodeName != m.Name {
		out = append(out, fmt.Sprintf("--node-name %s differs from this machine's registered name %s, which it keeps: "+
			"to rename it, delete the Machine (kubectl delete machine %s) and join again with a new join token", nodeName, m.Name, m.Name))
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if got, ok := m.Labels[k]; !ok || got != labels[k] {
			out = append(out, fmt.Sprintf("--label %s=%s differs from the Machine's (%q): labels are set when joining; "+
				"change them with kubectl label machine %s %s=%s --overwrite", k, labels[k], got, m.Name, k, labels[k]))
		}
	}
	if len(roles) > 0 && !sameSet(roles, m.Spec.Roles) {
		quoted := make([]string, len(roles))
		for i, r := range roles {
			quoted[i] = fmt.Sprintf("%q", r)
		}
		out = append(out, fmt.Sprintf("--role %s differs from the Machine's roles %v: roles are set when joining; "+
			`change them with kubectl patch machine %s --type=merge -p '{"spec":{"roles":[%s]}}'`,
			strings.Join(roles, ","), m.Spec.Roles, m.Name, strings.Join(quoted, ",")))
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// session is a client built from the certificate on disk at one moment,
// with its own connections. client-go's shared transport cache would hand a
// client made after a re-join or renewal the connections its predecessor
// opened with the old certificate, so a voided certificate would keep being
// used; a session owns its connections and closes them when it ends.
type session struct {
	musterclient.MusterV1alpha1Interface
	transport *http.Transport
	// http and host are the session's client and base URL, for the
	// tunnel's request (which is no API call).
	http *http.Client
	host string
}

// close drops the session's idle connections; requests in flight finish.
func (s *session) close() { s.transport.CloseIdleConnections() }

// client is the agent's certificate-authenticated client, with the
// certificate and key as they are on disk now.
func (a *agent) client() (*session, error) {
	server := a.cfg.Server
	if s, err := a.dir.read(serverFile); err == nil && server == "" {
		server = s
	}
	if a.lb != nil {
		server = "https://" + a.lb.Address()
	}
	var pem [3][]byte
	for i, f := range []string{caFile, certFile, keyFile} {
		b, err := os.ReadFile(a.dir.path(f))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", a.dir.path(f), err)
		}
		pem[i] = b
	}
	cfg := &rest.Config{
		// client-go's default of 5 requests/s would queue a plan's status
		// writes behind heartbeats and renewals.
		QPS: 50, Burst: 100,
		Host:            server,
		TLSClientConfig: rest.TLSClientConfig{CAData: pem[0], CertData: pem[1], KeyData: pem[2]},
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("loading the certificate in %s: %w", a.dir, err)
	}
	transport := utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		// The load balancer on loopback, which reaches the server through
		// the proxy if there is one.
		Proxy:       forwardproxy.NoProxy,
		DialContext: a.dialer().DialContext,
	})
	rt, err := rest.HTTPWrappersForConfig(cfg, transport)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: rt}
	c, err := musterclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &session{MusterV1alpha1Interface: c, transport: transport, http: hc, host: server}, nil
}

// Package kubectlmuster is the kubectl plugin `kubectl muster`: exec,
// port-forward and logs on a Machine, through the Machine subresources the
// server serves over each agent's tunnel (internal/tunnel). It reads the
// user's kubeconfig the way kubectl does, so it acts as the same user with
// the same rights.
package kubectlmuster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/muster-io/muster/internal/atomicfile"
	"github.com/muster-io/muster/internal/tunnel"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Options are the plugin's global flags, as kubectl spells them.
type Options struct {
	Kubeconfig string
	Context    string
	Stdout     io.Writer
	Stderr     io.Writer
}

// ExitError carries the exit code the plugin should end with.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit code %d", e.Code) }

// client is the user's identity and the server, from the kubeconfig.
type client struct {
	http *http.Client
	host string
}

func (o Options) client() (*client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: o.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w (set KUBECONFIG or --kubeconfig to the file muster-server wrote, e.g. admin.kubeconfig)", err)
	}
	// No client-side timeout: an exec or a port-forward lasts as long as
	// the user keeps it.
	cfg.Timeout = 0
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &client{http: hc, host: strings.TrimSuffix(cfg.Host, "/")}, nil
}

// ParseMachine accepts machine/NAME, machines/NAME or NAME.
func ParseMachine(s string) (string, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok {
		name, kind = s, "machine"
	}
	switch kind {
	case "machine", "machines", "ma", "mach", "machine.muster.io", "machines.muster.io":
	default:
		return "", fmt.Errorf("%q: give a machine as machine/NAME (kubectl get machines lists them)", s)
	}
	if name == "" {
		return "", fmt.Errorf("%q: the machine's name is missing, e.g. machine/edge-1", s)
	}
	return name, nil
}

func (c *client) url(machine, sub string, q url.Values) string {
	u := fmt.Sprintf("%s/apis/%s/%s/machines/%s/%s", c.host, api.GroupName, api.SchemeGroupVersion.Version, url.PathEscape(machine), sub)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// call makes one request to a machine subresource and returns the open
// response of a 200; anything else is the server's refusal as an error.
// body, if not nil, is streamed (ContentLength unknown).
func (c *client) call(ctx context.Context, method, machine, sub string, q url.Values, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(machine, sub, q), body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = -1
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the server: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, serverError(resp)
	}
	return resp, nil
}

// serverError is the server's refusal as kubectl prints one.
func serverError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		return fmt.Errorf("Error from server (%s): %s", st.Reason, st.Message)
	}
	return fmt.Errorf("Error from server (%s): %s", resp.Status, strings.TrimSpace(string(b)))
}

// Exec runs argv on machine, streams its stdout and stderr, and returns an
// *ExitError with the remote exit code when it is not zero.
func (o Options) Exec(ctx context.Context, machine string, argv []string) error {
	// Checked here too: a command line too long for the server's limit
	// would otherwise fail as an HTTP header error that says nothing useful.
	if err := tunnel.ValidateCommand(argv); err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	resp, err := c.call(ctx, http.MethodPost, machine, "exec", url.Values{"command": argv}, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf := make([]byte, tunnel.MaxFrameBytes)
	for {
		typ, payload, err := tunnel.ReadFrame(resp.Body, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended without the command's exit code (the server or the agent went away)")
			}
			return fmt.Errorf("exec on machine %s: %w", machine, err)
		}
		switch typ {
		case tunnel.FrameStdout:
			_, _ = o.Stdout.Write(payload)
		case tunnel.FrameStderr:
			_, _ = o.Stderr.Write(payload)
		case tunnel.FrameExit:
			code, err := tunnel.ExitCode(payload)
			if err != nil {
				return err
			}
			if code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		}
	}
}

// Logs copies the agent's recent log to stdout.
func (o Options) Logs(ctx context.Context, machine string) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	resp, err := c.call(ctx, http.MethodGet, machine, "log", nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(o.Stdout, resp.Body)
	return err
}

// ParsePorts reads LOCAL[:REMOTE]; REMOTE defaults to LOCAL.
func ParsePorts(s string) (local, remote int, err error) {
	l, r, ok := strings.Cut(s, ":")
	if !ok {
		r = l
	}
	local, err = strconv.Atoi(l)
	if err != nil || local < 0 || local > 65535 {
		return 0, 0, fmt.Errorf("%q: the local port must be 0 to 65535 (0 picks a free one), as LOCAL[:REMOTE]", s)
	}
	if remote, err = tunnel.ValidatePort(r); err != nil {
		return 0, 0, err
	}
	return local, remote, nil
}

// PortForward listens on 127.0.0.1:local and carries each connection to
// 127.0.0.1:remote on machine, each in its own stream, until ctx ends.
// ready, if set, is told the address listened on.
func (o Options) PortForward(ctx context.Context, machine string, local, remote int, ready func(addr string)) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return fmt.Errorf("listening on 127.0.0.1:%d: %w (choose another local port)", local, err)
	}
	context.AfterFunc(ctx, func() { _ = l.Close() })
	fmt.Fprintf(o.Stdout, "Forwarding from %s -> machine/%s port %d\n", l.Addr(), machine, remote)
	if ready != nil {
		ready(l.Addr().String())
	}
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			if err := c.forward(ctx, machine, remote, conn); err != nil {
				fmt.Fprintf(o.Stderr, "port-forward to machine/%s port %d: %v\n", machine, remote, err)
			}
		}()
	}
}

func (c *client) forward(ctx context.Context, machine string, remote int, conn net.Conn) error {
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The connection's bytes are the request body, streamed over HTTP/2
	// while the response streams back: one request per connection.
	resp, err := c.call(ctx, http.MethodPost, machine, "portforward", url.Values{"port": {strconv.Itoa(remote)}}, readOnly{conn})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(conn, resp.Body)
	return err
}

// readOnly is the connection as a request body. The HTTP client closes a
// request body when it has sent it, or when the server answered before it
// had (a refusal): then only the reading half may close, since the
// connection may still have a response to write. Closing it is also what
// ends a Read that waits on the local client, so a refused forward closes
// the local connection at once instead of when its client gives up.
type readOnly struct{ c net.Conn }

func (r readOnly) Read(p []byte) (int, error) { return r.c.Read(p) }

func (r readOnly) Close() error {
	if half, ok := r.c.(interface{ CloseRead() error }); ok {
		return half.CloseRead()
	}
	return nil
}

// ClusterKubeconfig writes a kubeconfig for cluster's own Kubernetes API through
// the server (/k8s/clusters/CLUSTER, internal/k8sproxy): the server and CA
// of the current context, the cluster's path on it, and the current
// context's user, its credentials copied in (files read), so that kubectl
// reaches the cluster as the same Muster user with the same roles. It is
// written to output (mode 0600) or, when output is "", to Stdout.
func (o Options) ClusterKubeconfig(ctx context.Context, cluster, output string) error {
	if cluster == "" || strings.Contains(cluster, "/") {
		return fmt.Errorf("%q: give a cluster's name (kubectl get clusters lists them)", cluster)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	raw, err := loader.RawConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w (set KUBECONFIG or --kubeconfig to your Muster kubeconfig)", err)
	}
	name := o.Context
	if name == "" {
		name = raw.CurrentContext
	}
	kctx := raw.Contexts[name]
	if kctx == nil {
		return fmt.Errorf("the kubeconfig has no context %q: pick one with --context (kubectl config get-contexts lists them)", name)
	}
	server, user := raw.Clusters[kctx.Cluster], raw.AuthInfos[kctx.AuthInfo]
	if server == nil || user == nil {
		return fmt.Errorf("context %q names cluster %q and user %q, which the kubeconfig does not both hold: fix the kubeconfig", name, kctx.Cluster, kctx.AuthInfo)
	}
	// Ask the server first: a cluster that does not exist, or a user who
	// may not read it, is told now rather than at the first kubectl.
	c, err := o.client()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/apis/%s/%s/clusters/%s", c.host, api.GroupName, api.SchemeGroupVersion.Version, url.PathEscape(cluster)), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the server: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("cluster %q does not exist on %s: kubectl get clusters lists them", cluster, c.host)
	case resp.StatusCode != http.StatusOK:
		return serverError(resp)
	}

	out := clientcmdapi.NewConfig()
	entry := "muster-" + cluster
	s := server.DeepCopy()
	s.Server = strings.TrimSuffix(server.Server, "/") + "/k8s/clusters/" + url.PathEscape(cluster)
	out.Clusters[entry] = s
	out.AuthInfos[entry] = user.DeepCopy()
	out.Contexts[entry] = &clientcmdapi.Context{Cluster: entry, AuthInfo: entry}
	out.CurrentContext = entry
	// One file that works wherever it is copied: paths to the CA and the
	// user's certificate become their content.
	if err := clientcmdapi.FlattenConfig(out); err != nil {
		return fmt.Errorf("reading the files the kubeconfig names: %w", err)
	}
	b, err := clientcmd.Write(*out)
	if err != nil {
		return err
	}
	if output == "" {
		_, err = o.Stdout.Write(b)
		return err
	}
	return atomicfile.Write(output, b, 0o600)
}

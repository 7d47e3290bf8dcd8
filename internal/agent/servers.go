package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/agent/loadbalancer"
	"github.com/muster-io/muster/internal/serverendpoint"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// lbStateFile keeps the servers the load balancer learned, with the
// --server they were learned through.
const lbStateFile = "loadbalancer.json"

// startLoadBalancer starts the local load balancer that every
// certificate-authenticated client goes through, seeded with --server (or
// the server the agent joined through). Joining itself goes to --server
// directly: the CA must be pinned from there before anything else.
func (a *agent) startLoadBalancer(ctx context.Context) error {
	if a.lb != nil {
		return nil
	}
	server := a.cfg.Server
	if s, err := a.dir.read(serverFile); err == nil && server == "" {
		server = s
	}
	seed, err := hostPort(server)
	if err != nil {
		return fatal("--server %q: %v", server, err)
	}
	if _, err := os.ReadFile(a.dir.path(caFile)); err != nil {
		return fmt.Errorf("reading the pinned CA: %w", err)
	}
	// The pinned CA is read for every check: a CA rotation replaces it
	// while the agent runs (refreshCA), and a server restarted after the
	// rotation's end presents a certificate of the new CA only.
	roots := func() *x509.CertPool {
		pool := x509.NewCertPool()
		if caPEM, err := os.ReadFile(a.dir.path(caFile)); err == nil {
			pool.AppendCertsFromPEM(caPEM)
		}
		return pool
	}
	// The clientID ranks the servers for this agent, so that agents
	// spread over them (identity wrote it before any certificate).
	clientID, _ := a.dir.read(clientIDFile)
	lb, err := loadbalancer.New(loadbalancer.Config{
		Seed:      seed,
		Key:       clientID,
		StateFile: a.dir.path(lbStateFile),
		// A server counts as healthy when it is ready (its datastore
		// answers), verified against the pinned CA.
		HealthCheck: func(ctx context.Context, address string) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+"/readyz", nil)
			if err != nil {
				return err
			}
			// Through the proxy like every connection to a server, so
			// a server counts healthy only if the agent can reach it.
			transport := a.dialer().Transport(&tls.Config{RootCAs: roots(), MinVersion: tls.VersionTLS12})
			transport.DisableKeepAlives = true
			check := &http.Client{Transport: transport}
			resp, err := check.Do(req)
			if err != nil {
				return a.dialer().Explain(address, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/readyz: %s", resp.Status)
			}
			return nil
		},
		// The load balancer picks the server; the connection to it goes
		// through the proxy (CONNECT) when HTTPS_PROXY applies to it.
		Dial: a.dialer().DialContext,
		Log:  a.say,
	})
	if err != nil {
		return err
	}
	a.lb = lb
	go lb.Run(ctx)
	return nil
}

// learnServers gives the load balancer the live ServerEndpoints. A failed
// or empty answer keeps what it knows.
func (a *agent) learnServers(ctx context.Context, c musterclient.MusterV1alpha1Interface) {
	if a.lb == nil {
		return
	}
	list, err := c.ServerEndpoints().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return
	}
	now := time.Now()
	var live []string
	for i := range list.Items {
		if serverendpoint.Live(&list.Items[i], now) {
			live = append(live, list.Items[i].Spec.Address)
		}
	}
	a.lb.SetServers(live)
}

// hostPort is the host:port of a server URL; https without a port is 443.
func hostPort(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("not a URL like https://10.0.0.1:9443")
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "443"), nil
	}
	return u.Host, nil
}

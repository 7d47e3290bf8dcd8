// Package agent is muster-agent: it joins a server with a join token (CA
// pinned by the token, node password, registration request), pivots to the
// client certificate it is granted, and from then on uses only that.
package agent

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/muster-io/muster/internal/agent/loadbalancer"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/version"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// Config is muster-agent's configuration, one field per flag.
type Config struct {
	Server              string
	Token               string
	NodeName            string
	WithNodeID          bool
	Labels              map[string]string
	Roles               []string
	DataDir             string
	InsecureSkipCACheck bool
	// Out receives the agent's account of each step.
	Out io.Writer
}

// Run joins if needed, then stays running until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	a := &agent{cfg: cfg, dir: dataDir(cfg.DataDir)}
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
		if c, err := a.client(); err == nil {
			go a.heartbeat(wctx, c, machine)
			go a.runPlans(wctx, c, machine)
		}
		a.renewWhenDue(ctx)
		stop()
	}
	return nil
}

type agent struct {
	cfg Config
	dir dataDir
	// lb carries every certificate-authenticated connection once the
	// agent holds a certificate.
	lb *loadbalancer.LoadBalancer
}

func (a *agent) say(format string, args ...interface{}) {
	fmt.Fprintf(a.cfg.Out, "muster-agent: "+format+"\n", args...)
}

// credential returns the machine name once the agent holds a working
// certificate: the stored one, or a new one from joining.
func (a *agent) credential(ctx context.Context) (string, error) {
	id, err := a.dir.identity(a.cfg.NodeName, a.cfg.WithNodeID)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(a.dir.path(certFile)); err == nil {
		// Through the load balancer, so that a restart finds the servers
		// it learned even when --server is down.
		if err := a.startLoadBalancer(ctx); err != nil {
			return "", err
		}
		machine, err := a.checkCertificate(ctx)
		if err == nil {
			a.say("using the stored certificate of machine %s (no re-registration)", machine)
			return machine, nil
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
			return "", fmt.Errorf("checking the stored certificate: %w", err)
		}
		a.say("the server refuses this machine's certificate: %v", err)
		if a.token() == "" {
			return "", fmt.Errorf("this machine's certificate is no longer valid (was the Machine deleted?): " +
				"run the agent again with a new --token from 'muster-server token create' to re-register")
		}
	}
	backoff := time.Second
	for {
		machine, err := a.join(ctx, id)
		if err == nil {
			return machine, nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return "", fatal.err
		}
		// Retries wait longer each time, with jitter, so a fleet restarting
		// together does not retry in lockstep.
		wait := backoff/2 + rand.N(backoff)
		a.say("joining failed: %v; retrying in %s", err, wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, time.Minute)
	}
}

// fatalError is a join failure that retrying cannot fix.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

func fatal(format string, args ...interface{}) error {
	return &fatalError{fmt.Errorf(format, args...)}
}

// token is the join token from the flag, or the one kept from an
// interrupted join.
func (a *agent) token() string {
	if a.cfg.Token != "" {
		return a.cfg.Token
	}
	t, _ := a.dir.read(tokenFile)
	return t
}

func (a *agent) join(ctx context.Context, id identity) (string, error) {
	raw := a.token()
	if raw == "" {
		return "", fatal("no join token: pass --token (from 'muster-server token create')")
	}
	tok, err := jointoken.Parse(raw)
	if err != nil {
		return "", fatal("%v", err)
	}
	if err := a.dir.write(tokenFile, []byte(raw+"\n")); err != nil {
		return "", fatal("keeping the join token in %s: %v", a.dir, err)
	}

	a.say("fetching the CA from %s/cacerts", a.cfg.Server)
	ca, err := jointoken.FetchCA(ctx, a.cfg.Server)
	if errors.Is(err, jointoken.ErrBadServerURL) {
		return "", fatal("%v", err)
	}
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(ca)
	switch {
	case tok.CAHash == "" && !a.cfg.InsecureSkipCACheck:
		return "", fatal("the token has no CA hash (K10<hash>::...), so the server cannot be verified: use the full token, or --insecure-skip-ca-check")
	case tok.CAHash == "":
		a.say("WARNING: not verifying the server's CA (--insecure-skip-ca-check): anyone on the path could impersonate the server")
	case hex.EncodeToString(sum[:]) != tok.CAHash:
		return "", fatal("the server's CA (sha256 %x) does not match the token's (%s): refusing to send any credential. "+
			"Check --server, or get a token from this server", sum, tok.CAHash)
	default:
		a.say("verified the server's CA against the token (sha256 %s…)", tok.CAHash[:12])
	}

	bootstrap, err := versioned.NewForConfig(&rest.Config{
		Host: a.cfg.Server, BearerToken: tok.Bearer(), TLSClientConfig: rest.TLSClientConfig{CAData: ca},
	})
	if err != nil {
		return "", err
	}
	granted, keyPEM, err := a.request(ctx, bootstrap, id)
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
	// The bootstrap credential has done its job; only the certificate is used from now on.
	if err := os.Remove(a.dir.path(tokenFile)); err != nil && !os.IsNotExist(err) {
		return "", fatal("removing the join token: %v", err)
	}
	a.say("stored the certificate of machine %s (cluster %s); removed the join token", granted.Status.Machine, granted.Status.Cluster)
	return granted.Status.Machine, nil
}

// request asks for a certificate with a fresh key and waits for the grant:
// with the join token when joining, with the current certificate when renewing.
func (a *agent) request(ctx context.Context, c versioned.Interface, id identity) (*api.ClusterRegistration, []byte, error) {
	key, keyPEM, err := pki.NewPrivateKey()
	if err != nil {
		return nil, nil, err
	}
	csr, err := pki.NewCSR(id.nodeName, key)
	if err != nil {
		return nil, nil, err
	}
	clientRandom, _ := randomHex(16)()
	reg := &api.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: api.RegistrationName(id.clientID, clientRandom)},
		Spec: api.ClusterRegistrationSpec{
			ClientID: id.clientID, ClientRandom: clientRandom, NodeName: id.nodeName,
			Labels: a.cfg.Labels, Roles: a.cfg.Roles, CSR: csr, NodePassword: id.nodePassword,
			AgentVersion: version.Version, Addresses: addresses(),
		},
	}
	regs := c.MusterV1alpha1().ClusterRegistrations()
	a.say("registering node %s (clientID %s)", id.nodeName, id.clientID)
	created, err := regs.Create(ctx, reg, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsInvalid(err) {
			return nil, nil, fatal("the server refused the registration: %v", err)
		}
		return nil, nil, err
	}
	// A token that needs no approval is granted in the create's answer.
	if err == nil && created.Status.Phase == api.RegistrationPhaseGranted {
		return created, keyPEM, nil
	}
	a.say("waiting for the registration to be granted")
	// Poll briskly at first (a grant takes milliseconds), then back off
	// for registrations that wait for an operator.
	interval := 100 * time.Millisecond
	for {
		// Served from the server's watch cache: polling costs the
		// datastore nothing, and a grant shows up within milliseconds.
		got, err := regs.Get(ctx, reg.Name, metav1.GetOptions{ResourceVersion: "0"})
		switch {
		case err != nil && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)):
			return nil, nil, fatal("the server refused the registration: %v", err)
		case apierrors.IsNotFound(err):
			// Just created; not in the cache yet.
		case err != nil:
			return nil, nil, err
		case got.Status.Phase == api.RegistrationPhaseGranted:
			return got, keyPEM, nil
		case got.Status.Phase == api.RegistrationPhaseDenied || got.Status.Phase == api.RegistrationPhaseExpired:
			return nil, nil, fatal("the registration was %s: %s", strings.ToLower(string(got.Status.Phase)), got.Status.Message)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(interval):
		}
		interval = min(interval*2, 2*time.Second)
	}
}

// renewWhenDue waits until two thirds of the certificate's life and renews
// it, with the certificate itself as the credential; it returns once it has
// renewed, or when ctx ends.
func (a *agent) renewWhenDue(ctx context.Context) {
	id, err := a.dir.identity(a.cfg.NodeName, a.cfg.WithNodeID)
	if err != nil {
		a.say("cannot renew the certificate: %v", err)
		<-ctx.Done()
		return
	}
	retry := time.Second
	for {
		cert, err := a.certificate()
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
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(due)):
		}
		c, err := a.client()
		if err == nil {
			var granted *api.ClusterRegistration
			var keyPEM []byte
			if granted, keyPEM, err = a.request(ctx, c, id); err == nil {
				// Key before certificate: a crash in between leaves a
				// mismatched pair, which the next start detects and rejoins from.
				if err = a.dir.write(keyFile, keyPEM); err == nil {
					err = a.dir.write(certFile, granted.Status.Certificate)
				}
			}
		}
		if err != nil {
			a.say("renewing the certificate failed: %v; retrying in %s", err, retry)
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
			retry = min(retry*2, 5*time.Minute)
			continue
		}
		renewed, _ := a.certificate()
		a.say("renewed the certificate; it is valid until %s", renewed.NotAfter.UTC().Format(time.RFC3339))
		return
	}
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

// checkCertificate reads the agent's own Machine with its certificate.
func (a *agent) checkCertificate(ctx context.Context) (string, error) {
	c, err := a.client()
	if err != nil {
		return "", err
	}
	cert, err := a.certificate()
	if err != nil {
		return "", err
	}
	name := strings.TrimPrefix(cert.Subject.CommonName, "muster:machine:")
	_, err = c.MusterV1alpha1().Machines().Get(ctx, name, metav1.GetOptions{})
	return name, err
}

// client is the agent's certificate-authenticated client.
func (a *agent) client() (versioned.Interface, error) {
	server := a.cfg.Server
	if s, err := a.dir.read(serverFile); err == nil && server == "" {
		server = s
	}
	if a.lb != nil {
		server = "https://" + a.lb.Address()
	}
	return versioned.NewForConfig(&rest.Config{
		// client-go's default of 5 requests/s would queue a plan's status
		// writes behind heartbeats and renewals.
		QPS: 50, Burst: 100,
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: a.dir.path(caFile), CertFile: a.dir.path(certFile), KeyFile: a.dir.path(keyFile),
		},
	})
}

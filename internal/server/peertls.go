package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/pki"
)

// peerTLS is how this server calls the other servers: a client certificate
// for identity muster:server:<name> issued from the shared CA, kept in
// memory only, and the deployment's CA bundle as the trusted roots: during
// a CA rotation the other servers' serving certificates are still the
// retiring CA's, and after --retire the new one's. A CA rotation reaching
// the running server swaps both (update); each new connection is dialled
// with the credentials of the moment, and idle ones are closed so that no
// request goes out on a connection made with a retired certificate.
type peerTLS struct {
	self string

	mu         sync.RWMutex
	pair       tls.Certificate
	roots      *x509.CertPool
	transports []*http.Transport
}

func newPeerTLS(ca *pki.CA, bundlePEM []byte, self string) (*peerTLS, error) {
	p := &peerTLS{self: self}
	return p, p.update(ca, bundlePEM)
}

// update issues a new peer certificate from ca and trusts bundlePEM (and
// ca) as the roots from now on.
func (p *peerTLS) update(ca *pki.CA, bundlePEM []byte) error {
	cn, groups := caller.ServerSubject(p.self)
	certPEM, keyPEM, err := ca.IssueClient(cn, groups, 365*24*time.Hour)
	if err != nil {
		return fmt.Errorf("issuing this server's peer certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	roots.AppendCertsFromPEM(bundlePEM)
	p.mu.Lock()
	p.pair, p.roots = pair, roots
	transports := p.transports
	p.mu.Unlock()
	for _, t := range transports {
		t.CloseIdleConnections()
	}
	return nil
}

// config is the TLS configuration of one connection to host, with the
// current certificate and roots; the server's certificate is verified
// against host as usual.
func (p *peerTLS) config(host string, nextProtos []string) *tls.Config {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return &tls.Config{Certificates: []tls.Certificate{p.pair}, RootCAs: p.roots, ServerName: host, NextProtos: nextProtos, MinVersion: tls.VersionTLS12}
}

// transport is an HTTP transport to the other servers (HTTP/2 when h2)
// that dials every connection with the credentials of the moment.
func (p *peerTLS) transport(h2 bool) *http.Transport {
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{"h2", "http/1.1"}
	}
	t := &http.Transport{
		ForceAttemptHTTP2: h2,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			d := &tls.Dialer{Config: p.config(host, protos)}
			return d.DialContext(ctx, network, addr)
		},
	}
	p.mu.Lock()
	p.transports = append(p.transports, t)
	p.mu.Unlock()
	return t
}

package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
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

// tlsConfig presents the peer certificate of the moment and verifies the
// other server against the roots of the moment, at each handshake. The
// transport keeps its own ALPN: a websocket upgrade forwarded to a peer
// must go over HTTP/1.1, which a dialer of our own offering h2 would lose.
func (p *peerTLS) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			p.mu.RLock()
			defer p.mu.RUnlock()
			pair := p.pair
			return &pair, nil
		},
		// The roots change with a rotation: the chain and the name are
		// checked here, against the roots of the moment, instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the other server presented no certificate")
			}
			p.mu.RLock()
			roots := p.roots
			p.mu.RUnlock()
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: cs.ServerName})
			return err
		},
	}
}

// transport is an HTTP transport to the other servers (HTTP/2 when h2)
// whose every handshake uses the credentials of the moment.
func (p *peerTLS) transport(h2 bool) *http.Transport {
	t := &http.Transport{ForceAttemptHTTP2: h2, TLSClientConfig: p.tlsConfig()}
	p.mu.Lock()
	p.transports = append(p.transports, t)
	p.mu.Unlock()
	return t
}

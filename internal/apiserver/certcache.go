package apiserver

import (
	"crypto/sha256"
	"crypto/x509"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

// Client-certificate verdicts are remembered for this long (at most until
// the certificate expires), for this many distinct certificates.
const (
	certCacheTTL  = 10 * time.Minute
	certCacheSize = 1 << 16
)

// cachedCertAuthenticator remembers who a client certificate chain
// authenticates as. Agents hold one connection and send every heartbeat,
// watch and status write over it; verifying the same chain's signatures on
// every request was the largest single cost of an agent's request (an
// ECDSA verification, ~0.1 ms). A chain is identified by the hash of its
// certificates and the CA pool it was verified against, so a changed CA
// bundle verifies afresh. Machine certificates are voided by
// authorization (their Machine must exist with the bound UID), which is
// checked on every request, not here.
type cachedCertAuthenticator struct {
	verifyOptions x509request.VerifyOptionFunc
	inner         authenticator.Request
	verdicts      *cache.LRUExpireCache
}

type certKey struct {
	roots *x509.CertPool
	chain [sha256.Size]byte
}

func newCachedCertAuthenticator(verifyOptions x509request.VerifyOptionFunc, inner authenticator.Request) *cachedCertAuthenticator {
	return &cachedCertAuthenticator{verifyOptions: verifyOptions, inner: inner, verdicts: cache.NewLRUExpireCache(certCacheSize)}
}

func (a *cachedCertAuthenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	opts, ok := a.verifyOptions()
	if !ok {
		return a.inner.AuthenticateRequest(req)
	}
	h := sha256.New()
	for _, c := range req.TLS.PeerCertificates {
		h.Write(c.Raw)
	}
	key := certKey{roots: opts.Roots}
	h.Sum(key.chain[:0])
	if resp, ok := a.verdicts.Get(key); ok {
		return resp.(*authenticator.Response), true, nil
	}
	resp, ok, err := a.inner.AuthenticateRequest(req)
	if ok && err == nil {
		ttl := min(certCacheTTL, time.Until(req.TLS.PeerCertificates[0].NotAfter))
		if ttl > 0 {
			a.verdicts.Add(key, resp, ttl)
		}
	}
	return resp, ok, err
}

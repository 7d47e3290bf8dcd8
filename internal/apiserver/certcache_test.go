package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"

	"github.com/muster-io/muster/internal/pki"
)

// countingAuthenticator counts the verifications that reach the real
// x509 authenticator.
type countingAuthenticator struct {
	inner authenticator.Request
	calls int
}

func (c *countingAuthenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	c.calls++
	return c.inner.AuthenticateRequest(req)
}

func TestCachedCertAuthenticator(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert := func(ca *pki.CA, cn string, validity time.Duration) *x509.Certificate {
		certPEM, _, err := ca.IssueClient(cn, []string{"g"}, validity)
		if err != nil {
			t.Fatal(err)
		}
		certs, err := pki.ParseCertsPEM(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		return certs[0]
	}
	roots := ca.CertPool()
	options := func() (x509.VerifyOptions, bool) {
		return x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
	}
	request := func(c *x509.Certificate) *http.Request {
		return &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}}
	}
	alice, bob, mallory := cert(ca, "alice", time.Hour), cert(ca, "bob", time.Hour), cert(other, "mallory", time.Hour)

	tests := []struct {
		name string
		// before runs ahead of the request, e.g. to rotate the roots.
		before    func()
		cert      *x509.Certificate
		wantUser  string
		wantCalls int // verifications so far, cumulative
	}{
		{name: "first request verifies", cert: alice, wantUser: "alice", wantCalls: 1},
		{name: "same certificate again is remembered", cert: alice, wantUser: "alice", wantCalls: 1},
		{name: "another certificate verifies", cert: bob, wantUser: "bob", wantCalls: 2},
		{name: "a certificate of another CA is refused", cert: mallory, wantCalls: 3},
		{name: "a refusal is not remembered", cert: mallory, wantCalls: 4},
		{name: "a new CA bundle verifies afresh", before: func() { roots = ca.CertPool() }, cert: alice, wantUser: "alice", wantCalls: 5},
		{name: "and refuses what the new bundle does not sign", before: func() { roots = other.CertPool() }, cert: bob, wantCalls: 6},
	}
	counting := &countingAuthenticator{inner: x509request.NewDynamic(func() (x509.VerifyOptions, bool) { return options() }, x509request.CommonNameUserConversion)}
	a := newCachedCertAuthenticator(func() (x509.VerifyOptions, bool) { return options() }, counting)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before()
			}
			resp, ok, _ := a.AuthenticateRequest(request(tt.cert))
			switch {
			case tt.wantUser == "" && ok:
				t.Errorf("authenticated as %q, want refused", resp.User.GetName())
			case tt.wantUser != "" && (!ok || resp.User.GetName() != tt.wantUser):
				t.Errorf("authenticated %v, want %q", ok, tt.wantUser)
			}
			if counting.calls != tt.wantCalls {
				t.Errorf("%d verifications so far, want %d", counting.calls, tt.wantCalls)
			}
		})
	}
}

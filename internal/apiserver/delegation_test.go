package apiserver

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/request/websocket"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// tokenReview stands for the kube-apiserver's TokenReview: it records
// every token it is asked about and accepts one.
type tokenReview struct {
	mu     sync.Mutex
	asked  []string
	accept string
}

func (r *tokenReview) AuthenticateToken(_ context.Context, token string) (*authenticator.Response, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, token)
	if token == r.accept {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "kube-user", Groups: []string{"devs"}}}, true, nil
	}
	return nil, false, nil
}

func (r *tokenReview) reset() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	asked := r.asked
	r.asked = nil
	return asked
}

// TestAggregatedJoinTokensNeverReachTokenReview (issue 27): in aggregated
// mode, a bearer token in the shape of a join token is Muster's alone to
// judge. One Muster refuses (a wrong secret, an unknown id) is a 401 that
// is never sent to the kube-apiserver's TokenReview, whether it comes in
// the Authorization header or as a WebSocket bearer protocol; an
// ordinary bearer token (a service account's JWT) still is. The chain is
// the one the server builds: Muster's authenticator (client certificates,
// join tokens, anonymous on public paths) then the delegate, here the
// delegated chain's own bearer and WebSocket readers over a recorder.
func TestAggregatedJoinTokensNeverReachTokenReview(t *testing.T) {
	const secret = "0123456789abcdefghijklmnopqrstuv"
	tokens := syncedTokens(t, &api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "abcdef"},
		Spec: api.ClusterRegistrationTokenSpec{SecretHash: jointoken.HashSecret(secret)}})
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := dynamiccertificates.NewStaticCAContent("client-ca", ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	const kubeToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDpib3QifQ.c2lnbmF0dXJl"
	review := &tokenReview{accept: kubeToken}
	delegated := union.New(bearertoken.New(review), websocket.NewProtocolAuthenticator(review))
	chain := withDelegate(newAuthenticator(clientCA, []authenticator.Token{tokens}, nil, nil, nil), delegated)

	bearer := func(token string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	}
	webSocket := func(token string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			r.Header.Set("Sec-WebSocket-Protocol", "channel.k8s.io, "+wsBearerPrefix+base64.RawURLEncoding.EncodeToString([]byte(token)))
		}
	}
	wrongSecret := "abcdef." + "x" + secret[1:]
	cases := []struct {
		name      string
		set       func(*http.Request)
		wantUser  string // "" for a 401
		forwarded bool   // whether TokenReview may be asked
	}{
		{"a join token with a wrong secret", bearer(wrongSecret), "", false},
		{"a join token of an unknown id", bearer("zzzzzz." + secret), "", false},
		{"a join token in its full form", bearer("K10" + strings.Repeat("a", 64) + "::zzzzzz." + secret), "", false},
		{"a wrong join token as a WebSocket bearer protocol", webSocket(wrongSecret), "", false},
		{"the right join token is Muster's", bearer("abcdef." + secret), caller.BootstrapUser("abcdef"), false},
		{"an ordinary bearer token goes to TokenReview", bearer(kubeToken), "kube-user", true},
		{"an ordinary token as a WebSocket bearer protocol goes to TokenReview", webSocket(kubeToken), "kube-user", true},
		{"an unknown ordinary token is asked about, and refused", bearer("not-a-join-token"), "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			review.reset()
			req := httptest.NewRequest(http.MethodGet, "/apis/muster.io/v1alpha1/machines", nil)
			tc.set(req)
			resp, ok, err := chain.AuthenticateRequest(req)
			asked := review.reset()
			if !tc.forwarded && len(asked) > 0 {
				t.Errorf("TokenReview was asked about %q: a join token's guess reached the kube-apiserver", asked)
			}
			if tc.forwarded && len(asked) == 0 {
				t.Error("TokenReview was never asked about an ordinary bearer token")
			}
			switch {
			case tc.wantUser == "" && ok:
				t.Errorf("authenticated as %q (err %v), want a 401", resp.User.GetName(), err)
			case tc.wantUser != "" && (!ok || resp.User.GetName() != tc.wantUser):
				t.Errorf("ok %v err %v user %v, want %q", ok, err, resp, tc.wantUser)
			}
		})
	}
}

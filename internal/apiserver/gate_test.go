package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/jointoken"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// tokenCache stands in for the join token informer: its cache, and its
// sync, which the test completes.
type tokenCache struct {
	idx    cache.Indexer
	synced chan struct{}
}

func newTokenCache() *tokenCache {
	return &tokenCache{idx: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), synced: make(chan struct{})}
}

func (c *tokenCache) Name() string          { return "join tokens" }
func (c *tokenCache) Done() <-chan struct{} { return c.synced }

// sync adds tokens to the cache and marks it synced (again: a no-op).
func (c *tokenCache) sync(t *testing.T, tokens ...*api.ClusterRegistrationToken) {
	t.Helper()
	for _, tok := range tokens {
		if err := c.idx.Add(tok); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-c.synced:
	default:
		close(c.synced)
	}
}

func (c *tokenCache) authenticator() *TokenAuthenticator {
	return NewTokenAuthenticator(listers.NewClusterRegistrationTokenLister(c.idx), c)
}

// syncedTokens is a token authenticator whose cache holds tokens, synced.
func syncedTokens(t *testing.T, tokens ...*api.ClusterRegistrationToken) *TokenAuthenticator {
	c := newTokenCache()
	c.sync(t, tokens...)
	return c.authenticator()
}

func TestTokenAuthenticator(t *testing.T) {
	const secret = "0123456789abcdefghijklmnopqrstuv"
	token := func(name string, mutate func(*api.ClusterRegistrationToken)) *api.ClusterRegistrationToken {
		tok := &api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.ClusterRegistrationTokenSpec{SecretHash: jointoken.HashSecret(secret)}}
		if mutate != nil {
			mutate(tok)
		}
		return tok
	}
	tokens := newTokenCache()
	a := tokens.authenticator()
	if _, _, err := a.AuthenticateToken(context.Background(), "abcdef."+secret); err == nil {
		t.Error("a token was judged before the tokens were loaded")
	}
	select {
	case <-a.Loaded():
		t.Fatal("Loaded is closed before the token cache synced")
	default:
	}
	tokens.sync(t, token("abcdef", nil), token("revoked", func(tok *api.ClusterRegistrationToken) { tok.Status.Phase = api.TokenPhaseRevoked }))
	<-a.Loaded()
	cases := []struct {
		name   string
		value  string
		ok     bool
		groups []string
	}{
		{"known id, right secret", "abcdef." + secret, true, []string{caller.BootstrappersGroup}},
		{"known id, wrong secret", "abcdef." + "x" + secret[1:], false, nil},
		{"unknown id", "zzzzzz." + secret, false, nil},
		{"revoked token", "revoked." + secret, true, []string{caller.InactiveBootstrappersGroup}},
		{"full form is not a bearer", "K10" + strings.Repeat("a", 64) + "::abcdef." + secret, false, nil},
		{"malformed", "not a token", false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, ok, err := a.AuthenticateToken(context.Background(), tc.value)
			if err != nil || ok != tc.ok {
				t.Fatalf("ok %v err %v, want ok %v", ok, err, tc.ok)
			}
			if ok && (len(resp.User.GetGroups()) != 1 || resp.User.GetGroups()[0] != tc.groups[0]) {
				t.Errorf("groups %v, want %v", resp.User.GetGroups(), tc.groups)
			}
		})
	}
}

func TestCredentialGate(t *testing.T) {
	const secret = "0123456789abcdefghijklmnopqrstuv"
	served := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++; w.WriteHeader(http.StatusOK) })
	tokens := newTokenCache()
	agents, err := NewAgentAuthorizer(AgentAuthorizerConfig{Live: liveObjects{}})
	if err != nil {
		t.Fatal(err)
	}
	newGate := func() *credentialGate {
		return &credentialGate{tokens: tokens.authenticator(), agents: agents, loopback: "loopback-secret",
			failures: newFailureLimiter(3, time.Minute), hold: 50 * time.Millisecond, recheck: 10 * time.Millisecond, rechecking: make(chan struct{}, 4),
			refuse: func(w http.ResponseWriter, _ *http.Request, err error) {
				status := apierrors.APIStatus(nil)
				if s, ok := err.(apierrors.APIStatus); ok {
					status = s
				}
				if d := status.Status().Details; d != nil && d.RetryAfterSeconds > 0 {
					w.Header().Set("Retry-After", "1")
				}
				w.WriteHeader(int(status.Status().Code))
			}}
	}
	send := func(g *credentialGate, bearer, addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/apis/muster.io/v1alpha1/clusterregistrations/x", nil)
		r.RemoteAddr = addr + ":40000"
		if bearer != "" {
			r.Header.Set("Authorization", "Bearer "+bearer)
		}
		w := httptest.NewRecorder()
		g.wrap(next).ServeHTTP(w, r)
		return w
	}

	g := newGate()
	// Before the tokens are loaded: held, then 503 with Retry-After; never 401.
	if w := send(g, "abcdef."+secret, "10.0.0.1"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("before loading: %d Retry-After %q, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	// The loopback token and requests without one pass at once.
	if w := send(g, "loopback-secret", "127.0.0.1"); w.Code != http.StatusOK {
		t.Errorf("loopback: %d", w.Code)
	}
	if w := send(g, "", "10.0.0.1"); w.Code != http.StatusOK {
		t.Errorf("no credential: %d", w.Code)
	}
	// A request held while the tokens load is served once they are.
	done := make(chan int)
	waiting := make(chan struct{}, 1)
	g.waiting = func() { waiting <- struct{}{} }
	g.hold = 5 * time.Second
	go func() { done <- send(g, "abcdef."+secret, "10.0.0.1").Code }()
	<-waiting
	tokens.sync(t, &api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "abcdef"},
		Spec: api.ClusterRegistrationTokenSpec{SecretHash: jointoken.HashSecret(secret)}})
	if code := <-done; code != http.StatusOK {
		t.Errorf("held request: %d, want it served once the tokens loaded", code)
	}

	// A token that reaches the cache while the first lookup's refusal
	// waits (created through another server) is let in.
	g.recheck = time.Second
	go func() { done <- send(g, "fresh1."+secret, "10.0.0.4").Code }()
	<-waiting
	tokens.sync(t, &api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "fresh1"},
		Spec: api.ClusterRegistrationTokenSpec{SecretHash: jointoken.HashSecret(secret)}})
	if code := <-done; code != http.StatusOK {
		t.Errorf("a token that arrived during the recheck wait: %d, want 200", code)
	}
	g.recheck = 10 * time.Millisecond
	g.waiting = nil

	// Failures per address: 401 up to the limit, then 429 for that address only.
	for i, want := range []int{401, 401, 401, 429, 429} {
		if w := send(g, "zzzzzz."+secret, "10.0.0.2"); w.Code != want {
			t.Errorf("failure %d: %d, want %d", i+1, w.Code, want)
		}
	}
	if w := send(g, "abcdef."+secret, "10.0.0.2"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a blocked address: %d, want 429", w.Code)
	}
	if w := send(g, "abcdef."+secret, "10.0.0.3"); w.Code != http.StatusOK {
		t.Errorf("another address: %d, want 200", w.Code)
	}

	// While every recheck slot is taken, a bad token is answered 429 at once.
	for i := 0; i < cap(g.rechecking); i++ {
		g.rechecking <- struct{}{}
	}
	if w := send(g, "zzzzzz."+secret, "10.0.0.5"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("with every recheck slot taken: %d, want 429 with Retry-After", w.Code)
	}
}

func TestFailureLimiterWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newFailureLimiter(2, time.Minute)
	l.now = func() time.Time { return now }
	steps := []struct {
		advance time.Duration
		record  bool
		blocked bool
	}{
		{0, true, false},
		{time.Second, true, true},
		{30 * time.Second, false, true},
		{30 * time.Second, false, false}, // the window ended
		{0, true, false},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		if s.record {
			l.record("c", "abcdef")
		}
		if got := l.blocked("c") > 0; got != s.blocked {
			t.Errorf("step %d: blocked %v, want %v", i, got, s.blocked)
		}
	}
}

// BenchmarkTokenLookup: a known id with a wrong secret and an unknown id
// cost the same (go test -bench TokenLookup ./internal/apiserver).
func BenchmarkTokenLookup(b *testing.B) {
	const secret = "0123456789abcdefghijklmnopqrstuv"
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := 0; i < 1000; i++ {
		_ = idx.Add(&api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tok%04d", i)},
			Spec: api.ClusterRegistrationTokenSpec{SecretHash: jointoken.HashSecret(secret)}})
	}
	c := &tokenCache{idx: idx, synced: make(chan struct{})}
	close(c.synced)
	a := c.authenticator()
	for _, bc := range []struct{ name, value string }{
		{"known-id-wrong-secret", "tok0500.x" + secret[1:]},
		{"unknown-id", "zzz0500.x" + secret[1:]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				_, _, _ = a.AuthenticateToken(context.Background(), bc.value)
			}
		})
	}
}

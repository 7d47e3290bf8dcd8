package apiserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/tunnel"
	"github.com/muster-io/muster/internal/tunnel/serve"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// testUserHeader names the caller in these tests, standing in for the
// client certificate: the authenticator is not what they test.
const testUserHeader = "X-Test-User"

// Tunnels are served ahead of the handler chain with the decision the
// chain made: a machine's own certificate opens one while its Machine
// lives, nothing else does, and deleting the Machine ends it.
func TestTunnelsAheadOfChain(t *testing.T) {
	deleting := metav1.Now()
	agents := liveAuthorizer(t,
		&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", UID: "uid-1"}},
		&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m2", UID: "uid-2", DeletionTimestamp: &deleting, Finalizers: []string{"x"}}},
	)
	machine := func(name, uid string) user.Info {
		cn, groups := caller.MachineSubject(name, uid, "c1")
		return &user.DefaultInfo{Name: cn, Groups: groups}
	}
	users := map[string]user.Info{
		"m1":       machine("m1", "uid-1"),
		"m2":       machine("m2", "uid-2"),
		"m1-old":   machine("m1", "uid-old"),
		"viewer":   &user.DefaultInfo{Name: "vera", Groups: []string{caller.ViewersGroup}},
		"operator": &user.DefaultInfo{Name: "otto", Groups: []string{caller.OperatorsGroup}},
		"admin":    &user.DefaultInfo{Name: "muster-admin", Groups: []string{user.SystemPrivilegedGroup}},
	}
	front := aheadOfChain{
		authn: authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
			u, ok := users[r.Header.Get(testUserHeader)]
			return &authenticator.Response{User: u}, ok, nil
		}),
		authz:      authorizer.AuthorizerFunc(Authorizer{Rules: []authorizer.AuthorizerFunc{agents.Authorize}}.Authorize),
		serializer: Codecs,
	}
	hub := tunnel.NewHub()
	var heard []string
	chain := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewUnstartedServer(withTunnels(chain, &serve.Server{Hub: hub}, front, agents, func(u user.Info) { heard = append(heard, u.GetName()) }))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name, who, method, path string
		code                    int
		says                    string
	}{
		{"no certificate", "", http.MethodPost, tunnel.Path, http.StatusUnauthorized, "machine certificate"},
		{"a viewer", "viewer", http.MethodPost, tunnel.Path, http.StatusForbidden, ""},
		{"an operator", "operator", http.MethodPost, tunnel.Path, http.StatusForbidden, ""},
		{"an administrator", "admin", http.MethodPost, tunnel.Path, http.StatusForbidden, "only a machine's agent"},
		{"a machine being deleted", "m2", http.MethodPost, tunnel.Path, http.StatusForbidden, "is being deleted"},
		{"a voided certificate", "m1-old", http.MethodPost, tunnel.Path, http.StatusForbidden, "no longer exists"},
		{"a GET", "m1", http.MethodGet, tunnel.Path, http.StatusMethodNotAllowed, ""},
		{"another path goes to the chain", "", http.MethodGet, "/apis", http.StatusTeapot, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			req.Header.Set(testUserHeader, tc.who)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.says) {
				t.Errorf("%d %.300s; want %d saying %q", resp.StatusCode, body, tc.code, tc.says)
			}
		})
	}
	if hub.Len() != 0 {
		t.Fatalf("%d tunnels open after refusals only", hub.Len())
	}

	// A machine's certificate opens its tunnel, and counts as heard.
	hc := srv.Client()
	hc.Transport = asUser{"m1", hc.Transport}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go (&tunnel.Client{Say: t.Logf}).Run(ctx, hc, srv.URL)
	waitUntil(t, "m1's tunnel to open", func() bool { return hub.Connected("m1") })
	if len(heard) == 0 || heard[len(heard)-1] != users["m1"].GetName() {
		t.Errorf("callers heard: %v; want the tunnel's machine last", heard)
	}
	// Deleting its Machine voids the certificate: the tunnel ends, and the
	// agent's attempts to reopen it are refused.
	agents.requests.void("uid-1")
	waitUntil(t, "m1's tunnel to end", func() bool { return !hub.Connected("m1") })
	time.Sleep(2 * time.Second)
	if hub.Connected("m1") {
		t.Fatal("a voided certificate reopened its tunnel")
	}
}

// asUser names the caller of every request, as testUserHeader.
type asUser struct {
	who  string
	next http.RoundTripper
}

func (a asUser) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(testUserHeader, a.who)
	return a.next.RoundTrip(r)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

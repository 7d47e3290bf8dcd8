package apiserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/console"
	"github.com/muster-io/muster/internal/install"
)

// TestConsolePrivatePathsRefusedBeforeHandler (issue 27): the console's
// token minting is under the console's public prefix, yet the authorizer
// refuses it to anonymous callers (and to every role but
// administrators) for every method, so that only the handler's second
// lock was never the one holding. The attributes are the ones the
// handler chain makes from a real request.
func TestConsolePrivatePathsRefusedBeforeHandler(t *testing.T) {
	// As muster-server configures it (internal/server).
	a := Authorizer{
		PublicPaths:      []string{install.ScriptPath, install.AssetsPrefix, console.Prefix},
		PrivatePaths:     console.PrivatePaths,
		PublicWritePaths: []string{console.SessionPath},
	}
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	attributes := func(who user.Info, method, path string) authorizer.Attributes {
		r := httptest.NewRequest(method, path, nil)
		info, err := resolver.NewRequestInfo(r)
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := filters.GetAuthorizerAttributes(request.WithRequestInfo(request.WithUser(r.Context(), who), info))
		if err != nil {
			t.Fatal(err)
		}
		return attrs
	}
	anon := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	viewer := &user.DefaultInfo{Name: "vera", Groups: []string{caller.ViewersGroup, user.AllAuthenticated}}
	operator := &user.DefaultInfo{Name: "otto", Groups: []string{caller.OperatorsGroup, user.AllAuthenticated}}
	admin := &user.DefaultInfo{Name: "muster-admin", Groups: []string{user.SystemPrivilegedGroup}}
	for _, tc := range []struct {
		who          user.Info
		method, path string
		want         authorizer.Decision
	}{
		{anon, http.MethodGet, console.TokensPath, authorizer.DecisionDeny},
		{anon, http.MethodPost, console.TokensPath, authorizer.DecisionDeny},
		{anon, http.MethodHead, console.TokensPath, authorizer.DecisionDeny},
		{viewer, http.MethodGet, console.TokensPath, authorizer.DecisionDeny},
		{operator, http.MethodGet, console.TokensPath, authorizer.DecisionDeny},
		{admin, http.MethodPost, console.TokensPath, authorizer.DecisionAllow},
		// What stays public: the sign-in page, its assets, the sign-in,
		// install.sh and the binaries.
		{anon, http.MethodGet, console.Prefix, authorizer.DecisionAllow},
		{anon, http.MethodGet, "/console/app.js", authorizer.DecisionAllow},
		{anon, http.MethodPost, console.SessionPath, authorizer.DecisionAllow},
		{anon, http.MethodGet, install.ScriptPath, authorizer.DecisionAllow},
		{anon, http.MethodGet, "/assets/muster-agent-linux-amd64.sha256", authorizer.DecisionAllow},
	} {
		got, reason, err := a.Authorize(context.Background(), attributes(tc.who, tc.method, tc.path))
		if err != nil || got != tc.want {
			t.Errorf("%s %s %s: %v (%q) %v, want %v", tc.who.GetName(), tc.method, tc.path, got, reason, err, tc.want)
		}
	}
}

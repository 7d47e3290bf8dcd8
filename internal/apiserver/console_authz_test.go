package apiserver

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
)

// TestConsolePaths: the console's pages are public to read, its sign-in
// is public to post and delete, and minting console tokens is for
// administrators only.
func TestConsolePaths(t *testing.T) {
	a := Authorizer{PublicPaths: []string{"/console/"}, PublicWritePaths: []string{"/console/session"}}
	anon := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	viewer := &user.DefaultInfo{Name: "vera", Groups: []string{caller.ViewersGroup}}
	admin := &user.DefaultInfo{Name: "muster-admin", Groups: []string{user.SystemPrivilegedGroup}}
	for _, tc := range []struct {
		who        user.Info
		verb, path string
		want       authorizer.Decision
	}{
		{anon, "get", "/console/", authorizer.DecisionAllow},
		{anon, "get", "/console/app.js", authorizer.DecisionAllow},
		{anon, "post", "/console/session", authorizer.DecisionAllow},
		{anon, "delete", "/console/session", authorizer.DecisionAllow},
		{anon, "put", "/console/session", authorizer.DecisionDeny},
		{anon, "post", "/console/app.js", authorizer.DecisionDeny},
		{anon, "post", "/console/tokens", authorizer.DecisionDeny},
		{viewer, "post", "/console/tokens", authorizer.DecisionDeny},
		{admin, "post", "/console/tokens", authorizer.DecisionAllow},
	} {
		got, _, err := a.Authorize(context.Background(), authorizer.AttributesRecord{User: tc.who, Verb: tc.verb, Path: tc.path})
		if err != nil || got != tc.want {
			t.Errorf("%s %s %s: %v %v, want %v", tc.who.GetName(), tc.verb, tc.path, got, err, tc.want)
		}
	}
}

package apiserver

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
)

// publicPaths are served to anyone, authenticated or not: what an agent
// needs before it has any credential (/cacerts, to pin the CA) and what load
// balancers and probes poll.
var publicPaths = []string{"/cacerts", "/healthz", "/livez", "/readyz", "/version"}

func isPublicPath(path string) bool {
	for _, p := range publicPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

func (a Authorizer) isPublic(path string) bool {
	if slices.Contains(a.PrivatePaths, path) {
		return false
	}
	for _, p := range a.PublicPaths {
		if path == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

// Authorizer decides every request. Rules are evaluated in order; the first
// that decides wins, and anything no rule allows is denied.
type Authorizer struct {
	// Rules are extra authorizers (agents, bootstrap tokens) consulted after
	// the built-in ones.
	Rules []authorizer.AuthorizerFunc
	// PeerPaths are non-resource paths the other servers may GET.
	PeerPaths []string
	// PublicPaths are more non-resource paths anyone may GET (the install
	// script and the binaries it downloads); one ending in "/" is a prefix.
	PublicPaths []string
	// PrivatePaths are exact paths under a public prefix that are not
	// public: a caller needs a credential and a role that allows them
	// (the console's token minting, for administrators). Anonymous
	// requests for them are refused here, before their handler.
	PrivatePaths []string
	// PublicWritePaths are exact paths anyone may also POST to and DELETE
	// (the console's sign-in and sign-out; the handler judges the token).
	PublicWritePaths []string
	// Scopes, if set, judges users by their AccessBindings (scope.go),
	// after the built-in roles and before the agents' rules.
	Scopes *Scopes
}

// Authorize implements authorizer.Authorizer.
func (a Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := attrs.GetUser(); u != nil {
		for _, g := range u.GetGroups() {
			if g == user.SystemPrivilegedGroup {
				return authorizer.DecisionAllow, "", nil
			}
		}
	}
	if !attrs.IsResourceRequest() && attrs.GetVerb() == "get" && (isPublicPath(attrs.GetPath()) || a.isPublic(attrs.GetPath())) {
		return authorizer.DecisionAllow, "", nil
	}
	if !attrs.IsResourceRequest() && slices.Contains(a.PublicWritePaths, attrs.GetPath()) &&
		slices.Contains([]string{"get", "post", "delete"}, attrs.GetVerb()) {
		return authorizer.DecisionAllow, "", nil
	}
	if !attrs.IsResourceRequest() && attrs.GetVerb() == "get" && caller.IsServer(attrs.GetUser()) {
		for _, p := range a.PeerPaths {
			if attrs.GetPath() == p {
				return authorizer.DecisionAllow, "", nil
			}
		}
		return authorizer.DecisionDeny, "a server's peer certificate may only read the paths servers serve each other", nil
	}
	if attrs.GetVerb() == "impersonate" && caller.IsServer(attrs.GetUser()) {
		// A server forwards a user's request for a machine whose tunnel
		// another server holds (internal/tunnel/serve) as that user, so
		// the other server authorizes and audits the user, not the
		// server. Only servers hold a peer certificate, and they already
		// share the CA that signs every identity.
		return authorizer.DecisionAllow, "", nil
	}
	if roleAllows(attrs) {
		return authorizer.DecisionAllow, "", nil
	}
	if a.Scopes != nil {
		if decision, reason, err := a.Scopes.Authorize(ctx, attrs); err != nil || decision != authorizer.DecisionNoOpinion {
			return decision, reason, err
		}
	}
	for _, rule := range a.Rules {
		decision, reason, err := rule(ctx, attrs)
		if err != nil || decision != authorizer.DecisionNoOpinion {
			return decision, reason, err
		}
	}
	return authorizer.DecisionDeny, roleDenial(attrs), nil
}

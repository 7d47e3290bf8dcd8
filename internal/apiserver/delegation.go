package apiserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/jointoken"
)

// Delegation runs Muster as an aggregated API server behind a
// kube-apiserver: users the aggregator sends are authenticated from its
// front-proxy headers (the kube-system/extension-apiserver-authentication
// ConfigMap says whom to believe) and by TokenReview, and authorized by
// SubjectAccessReview, as sample-apiserver does. Agents, servers and
// Muster's own certificates keep being decided by Muster first: 5,000
// agents' watches never go through the aggregator.
type Delegation struct {
	// AuthenticationKubeconfig and AuthorizationKubeconfig reach the
	// kube-apiserver (sample-apiserver's flags of the same names).
	AuthenticationKubeconfig, AuthorizationKubeconfig string
}

func (d *Delegation) enabled() bool {
	return d != nil && (d.AuthenticationKubeconfig != "" || d.AuthorizationKubeconfig != "")
}

// apply puts the delegated authenticator after Muster's and returns the
// delegated authorizer, to be consulted after Muster's own rules.
func (d *Delegation) apply(rc *genericapiserver.RecommendedConfig, own authenticator.Request) (authenticator.Request, authorizer.Authorizer, error) {
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = d.AuthenticationKubeconfig
	info := rc.Authentication
	if err := authn.ApplyTo(&info, rc.SecureServing, nil); err != nil {
		return nil, nil, fmt.Errorf("aggregated mode: delegated authentication through %s: %w (the kubeconfig's user needs create tokenreviews and the extension-apiserver-authentication-reader role: muster-server manifests aggregated prints them)", d.AuthenticationKubeconfig, err)
	}
	rc.Authentication.RequestHeaderConfig = info.RequestHeaderConfig
	delegated := info.Authenticator

	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFile = d.AuthorizationKubeconfig
	authz.AlwaysAllowPaths = nil // Muster's own rules decide its public paths
	var zinfo genericapiserver.AuthorizationInfo
	if err := authz.ApplyTo(&zinfo); err != nil {
		return nil, nil, fmt.Errorf("aggregated mode: delegated authorization through %s: %w (the kubeconfig's user needs create subjectaccessreviews: the system:auth-delegator role)", d.AuthorizationKubeconfig, err)
	}

	return withDelegate(own, delegated), zinfo.Authorizer, nil
}

// withDelegate is the authenticator of aggregated mode: Muster's own
// credentials first; a request none of them claims goes to the
// kube-apiserver's (front-proxy headers, TokenReview). Two kinds never
// reach it:
//   - a bearer token in the shape of a join token ("<id>.<secret>" or
//     "K10<hash>::<id>.<secret>", in the Authorization header or a
//     WebSocket bearer protocol) is Muster's alone to judge: one Muster
//     refused is a 401 here, so that guesses at a join token are never
//     sent to the kube-apiserver's TokenReview and its audit log (nor get
//     past Muster's per-address limit that way);
//   - the delegated chain ends in anonymous, which would turn every
//     unknown caller into system:anonymous: it stays a 401.
func withDelegate(own, delegated authenticator.Request) authenticator.Request {
	notAnonymous := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if carriesJoinToken(req) {
			return nil, false, nil
		}
		resp, ok, err := delegated.AuthenticateRequest(req)
		if ok && resp.User.GetName() == user.Anonymous {
			return nil, false, nil
		}
		if ok && caller.Reserved(resp.User) {
			return nil, false, fmt.Errorf("user %q from the kube-apiserver claims an identity only muster issues (an agent's or a server's); refused", resp.User.GetName())
		}
		return resp, ok, err
	})
	return union.New(own, notAnonymous)
}

// wsBearerPrefix is how a WebSocket client (which cannot set headers in a
// browser) carries a bearer token: as a subprotocol, base64url-encoded.
// The kube-apiserver's delegated chain reads it; Muster's own does not.
const wsBearerPrefix = "base64url.bearer.authorization.k8s.io."

// carriesJoinToken reports whether req presents, anywhere a bearer token
// is read, one in the shape of a join token.
func carriesJoinToken(req *http.Request) bool {
	if token, ok := bearerToken(req); ok {
		if _, err := jointoken.Parse(token); err == nil {
			return true
		}
	}
	for _, header := range req.Header.Values("Sec-Websocket-Protocol") {
		for _, proto := range strings.Split(header, ",") {
			encoded, ok := strings.CutPrefix(strings.TrimSpace(proto), wsBearerPrefix)
			if !ok {
				continue
			}
			raw, err := base64.RawURLEncoding.DecodeString(encoded)
			if err != nil {
				continue
			}
			if _, err := jointoken.Parse(string(raw)); err == nil {
				return true
			}
		}
	}
	return false
}

// delegate consults the kube-apiserver for what Muster's own rules leave
// undecided.
func delegate(a authorizer.Authorizer) authorizer.AuthorizerFunc {
	return func(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
		return a.Authorize(ctx, attrs)
	}
}

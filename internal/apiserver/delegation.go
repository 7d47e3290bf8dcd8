package apiserver

import (
	"context"
	"fmt"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/muster-io/muster/internal/caller"
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

	// Muster's own credentials first; a request none of them claims goes
	// to the kube-apiserver's. The delegated chain ends in anonymous, which
	// would turn every unknown caller into system:anonymous: it stays a 401.
	notAnonymous := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := delegated.AuthenticateRequest(req)
		if ok && resp.User.GetName() == user.Anonymous {
			return nil, false, nil
		}
		if ok && caller.Reserved(resp.User) {
			return nil, false, fmt.Errorf("user %q from the kube-apiserver claims an identity only muster issues (an agent's or a server's); refused", resp.User.GetName())
		}
		return resp, ok, err
	})
	return union.New(own, notAnonymous), zinfo.Authorizer, nil
}

// delegate consults the kube-apiserver for what Muster's own rules leave
// undecided.
func delegate(a authorizer.Authorizer) authorizer.AuthorizerFunc {
	return func(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
		return a.Authorize(ctx, attrs)
	}
}

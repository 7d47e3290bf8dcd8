package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"
)

// aheadOfChain admits the agents' requests that are served ahead of the
// apiserver's handler chain (heartbeats, tunnels), where the chain costs
// more than the request: with the chain's own authenticator and
// authorizer, on the attributes the chain would give, so that the
// decision is the one every other request gets, made in one place.
type aheadOfChain struct {
	authn      authenticator.Request
	authz      authorizer.Authorizer
	serializer runtime.NegotiatedSerializer
}

func newAheadOfChain(c *genericapiserver.Config) aheadOfChain {
	return aheadOfChain{authn: c.Authentication.Authenticator, authz: c.Authorization.Authorizer, serializer: c.Serializer}
}

// admit returns r's caller once it is authenticated and allowed r's method
// on r's path; otherwise the error to refuse r with. needs says what
// credential the request needs, for the 401.
func (a aheadOfChain) admit(r *http.Request, needs string) (user.Info, error) {
	resp, ok, err := a.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		return nil, apierrors.NewUnauthorized(needs)
	}
	// A non-resource request: the chain's request info makes its verb the
	// method, lower case.
	attrs := authorizer.AttributesRecord{User: resp.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
	decision, reason, err := a.authz.Authorize(r.Context(), attrs)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("authorizing %s %s: %w", r.Method, r.URL.Path, err))
	}
	if decision != authorizer.DecisionAllow {
		return nil, apierrors.NewForbidden(schema.GroupResource{}, "", errors.New(reason))
	}
	return resp.User, nil
}

// refuse answers r with err, as the chain would.
func (a aheadOfChain) refuse(w http.ResponseWriter, r *http.Request, err error) {
	responsewriters.ErrorNegotiated(err, a.serializer, schema.GroupVersion{}, w, r)
}

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

// aheadRoute is one kind of request served ahead of the chain.
type aheadRoute struct {
	path, method string
	// resource names the request in a 405, needs the credential in a 401.
	resource, needs string
	// refused, if set, is told of every refusal (for a metric).
	refused func(error)
	serve   func(http.ResponseWriter, *http.Request, user.Info)
}

// route serves rt's requests, once admitted and observed (the caller is
// heard), ahead of the chain; everything else goes to next.
func (a aheadOfChain) route(next http.Handler, rt aheadRoute, observe func(user.Info)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != rt.path {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != rt.method {
			a.refuse(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: rt.resource}, r.Method))
			return
		}
		u, err := a.admit(r, rt.needs)
		if err != nil {
			if rt.refused != nil {
				rt.refused(err)
			}
			a.refuse(w, r, err)
			return
		}
		if observe != nil {
			observe(u)
		}
		rt.serve(w, r, u)
	})
}

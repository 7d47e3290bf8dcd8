package apiserver

import (
	"crypto/x509"
	"net/http"
	"time"

	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/pki"
)

// newAuthenticator accepts, in order: client certificates signed by the
// cluster CA (CN is the user, O the groups), bearer tokens that one of
// tokens recognises (join tokens, identity providers' ID tokens), console sessions (a cookie with the console's
// header), and anonymous requests only on the public paths,
// so that an unauthenticated request anywhere else is a 401, not a 403.
// Extra public paths (publicPrefixes: exact, or a prefix when they end in
// "/") are anonymous too, except the private paths under them: a request
// for one without a credential is a 401.
func newAuthenticator(clientCA dynamiccertificates.CAContentProvider, tokens []authenticator.Token, sessions authenticator.Request, publicPrefixes, privatePaths []string) authenticator.Request {
	authenticators := []authenticator.Request{
		newCachedCertAuthenticator(clientCA.VerifyOptions,
			x509request.NewDynamic(clientCA.VerifyOptions, machineIssuedConversion)),
	}
	if len(tokens) > 0 {
		// Each token authenticator answers "not mine" for another's
		// tokens (a join token is no JWT); a refusal's reason is logged.
		authenticators = append(authenticators, bearertoken.New(tokenunion.New(tokens...)))
	}
	if sessions != nil {
		authenticators = append(authenticators, sessions)
	}
	var conditions []apiserverapi.AnonymousAuthCondition
	for _, p := range publicPaths {
		conditions = append(conditions, apiserverapi.AnonymousAuthCondition{Path: p})
	}
	// A union fails over to the next authenticator on "not mine"; the
	// anonymous one answers only for the listed paths.
	extra := Authorizer{PublicPaths: publicPrefixes, PrivatePaths: privatePaths}
	anon := anonymous.NewAuthenticator(conditions)
	return union.NewFailOnError(union.New(authenticators...), authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if extra.isPublic(req.URL.Path) {
			return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
		}
		return anon.AuthenticateRequest(req)
	}))
}

// machineIssuedConversion is x509's common-name conversion, and for a
// machine certificate the time the CA issued it (caller.IssuedExtra): a
// rejoin after a restore is judged by it (internal/rejoin).
var machineIssuedConversion = x509request.UserConversionFunc(func(chain []*x509.Certificate) (*authenticator.Response, bool, error) {
	resp, ok, err := x509request.CommonNameUserConversion.User(chain)
	if !ok || err != nil || !caller.ClaimsMachine(chain[0].Subject.CommonName) {
		return resp, ok, err
	}
	if u, isDefault := resp.User.(*user.DefaultInfo); isDefault {
		if u.Extra == nil {
			u.Extra = map[string][]string{}
		}
		u.Extra[caller.IssuedExtra] = []string{pki.IssuedAt(chain[0]).UTC().Format(time.RFC3339)}
	}
	return resp, ok, err
})

// CallerName names the authenticated caller of a request the chain has
// seen, "" for an anonymous one (or a request outside the chain).
func CallerName(r *http.Request) string {
	u, ok := request.UserFrom(r.Context())
	if !ok || u.GetName() == user.Anonymous {
		return ""
	}
	return u.GetName()
}

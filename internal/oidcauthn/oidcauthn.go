// Package oidcauthn signs people in with their organisation's identity
// provider: it reads an AuthenticationConfiguration file (kube-apiserver's
// --authentication-config, apiserver.config.k8s.io/v1) and turns each of its
// jwt entries into k8s.io/apiserver's JWT authenticator, which verifies ID
// tokens (issuer, audiences, signature with the provider's published keys,
// expiry, claim rules) and maps their claims to a user and groups. Muster
// writes no JWT validation of its own; it only adds, around the library's
// answer, a reason for every refusal (the library says nothing of a token
// from an issuer it does not know) and a refusal of identities that belong
// to agents, servers or Kubernetes itself.
//
// The groups a token maps to are Muster's groups like any other: the
// built-in roles (muster:viewers, muster:operators, muster:metrics-readers,
// system:masters) as a client certificate's or a console token's groups
// are, so a provider's group is mapped to a role by the file's
// claimMappings (a prefix or a CEL expression).
package oidcauthn

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/util/filesystem"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/caller"
)

// Flag is the server flag that names the file, spelled as kube-apiserver's.
const Flag = "authentication-config"

// signingAlgs are the algorithms a provider may sign with: every
// asymmetric one the library allows. Never "none" nor a shared-secret HMAC.
var signingAlgs = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"}

// readyWithin is how long Load waits for the providers' discovery
// documents before serving anyway (their tokens are refused until then).
var readyWithin = 10 * time.Second

// Authenticator verifies ID tokens from the configured providers. The
// file is watched: a change that reads and validates replaces the
// providers once the new ones have loaded their keys (or after
// reloadWait), as kube-apiserver does; one that does not is logged and the
// running providers stay.
type Authenticator struct {
	// Path is the file it was read from.
	Path    string
	current atomic.Pointer[providers]
}

// providers are the authenticators of one version of the file.
type providers struct {
	raw     []byte
	issuers []string
	entries []apiserver.JWTAuthenticator
	each    []oidc.AuthenticatorTokenWithHealthCheck
	union   authenticator.Token
	// stop ends these providers' key fetching, once they are replaced.
	stop context.CancelFunc
}

// reloadWait bounds how long a changed file's providers may take to load
// their keys before they replace the running ones anyway.
var reloadWait = 30 * time.Second

// Read decodes and validates an AuthenticationConfiguration file the way
// kube-apiserver does (strict decoding, the library's validation with its
// CEL compiler). The anonymous section is refused: Muster decides itself
// which paths anonymous callers reach.
func Read(path string) (*apiserver.AuthenticationConfiguration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", Flag, err)
	}
	return decode(path, b)
}

func decode(path string, b []byte) (*apiserver.AuthenticationConfiguration, error) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	obj, _, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDecoder().Decode(b, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w; the file is an AuthenticationConfiguration (apiVersion: apiserver.config.k8s.io/v1), as kube-apiserver reads", Flag, path, err)
	}
	cfg, ok := obj.(*apiserver.AuthenticationConfiguration)
	if !ok {
		return nil, fmt.Errorf("--%s %s holds a %T, not an AuthenticationConfiguration", Flag, path, obj)
	}
	if cfg.Anonymous != nil {
		return nil, fmt.Errorf("--%s %s: remove the anonymous section: muster-server serves anonymous callers only its public paths (/cacerts, /healthz, the install script), whatever the file says", Flag, path)
	}
	if len(cfg.JWT) == 0 {
		return nil, fmt.Errorf("--%s %s names no provider: give at least one jwt entry (issuer, audiences, claimMappings)", Flag, path)
	}
	if errs := validation.ValidateAuthenticationConfiguration(authenticationcel.NewDefaultCompiler(), cfg, nil); len(errs) > 0 {
		return nil, fmt.Errorf("--%s %s: %w", Flag, path, errs.ToAggregate())
	}
	return cfg, nil
}

// Load reads the file and starts one authenticator per provider, living
// as long as ctx. Each reads its provider's discovery document and keys
// (trusting the entry's certificateAuthority, else the system's roots) and
// fetches the keys again when a token names one it has not seen, so a
// provider's key rotation needs no restart. Load waits a little for the
// providers to answer and logs those that did not; then it watches the
// file for changes.
func Load(ctx context.Context, path string) (*Authenticator, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", Flag, err)
	}
	p, err := build(ctx, path, raw)
	if err != nil {
		return nil, err
	}
	a := &Authenticator{Path: path}
	a.current.Store(p)
	p.await(ctx, readyWithin)
	if err := p.healthCheck(); err != nil {
		klog.InfoS("Identity provider not reachable yet: its tokens are refused until it is (retried every 10s)", "file", path, "reason", err.Error())
	}
	klog.InfoS("Signing in with identity providers", "file", path, "issuers", p.issuers)
	go filesystem.WatchUntil(ctx, time.Minute, path, func() { a.reload(ctx) }, func(err error) {
		klog.InfoS("Watching --"+Flag+" for changes failed; it is read again every minute", "file", path, "reason", err.Error())
	})
	return a, nil
}

// reload reads the file again and, if it changed and is valid, swaps in
// its providers; the old ones stop a minute later, when requests that
// began with them are done.
func (a *Authenticator) reload(ctx context.Context) {
	raw, err := os.ReadFile(a.Path)
	old := a.current.Load()
	if err == nil && bytes.Equal(raw, old.raw) {
		return
	}
	var p *providers
	if err == nil {
		p, err = build(ctx, a.Path, raw)
	}
	if err != nil {
		klog.ErrorS(err, "The changed --"+Flag+" is refused; signing in with the previous one", "file", a.Path, "issuers", old.issuers)
		return
	}
	p.await(ctx, reloadWait)
	a.current.Store(p)
	time.AfterFunc(time.Minute, old.stop)
	klog.InfoS("Signing in with identity providers from the changed --"+Flag, "file", a.Path, "issuers", p.issuers, "notReady", fmt.Sprint(p.healthCheck()))
}

// build starts the authenticators of one version of the file.
func build(ctx context.Context, path string, raw []byte) (*providers, error) {
	cfg, err := decode(path, raw)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	compiler := authenticationcel.NewDefaultCompiler()
	p := &providers{raw: raw, stop: stop}
	var toks []authenticator.Token
	for i, j := range cfg.JWT {
		opts := oidc.Options{JWTAuthenticator: j, Compiler: compiler, SupportedSigningAlgs: signingAlgs}
		if j.Issuer.CertificateAuthority != "" {
			ca, err := dynamiccertificates.NewStaticCAContent(fmt.Sprintf("oidc-%d", i), []byte(j.Issuer.CertificateAuthority))
			if err != nil {
				stop()
				return nil, fmt.Errorf("--%s %s: jwt[%d] (%s): certificateAuthority: %w", Flag, path, i, j.Issuer.URL, err)
			}
			opts.CAContentProvider = ca
		}
		t, err := oidc.New(ctx, opts)
		if err != nil {
			stop()
			return nil, fmt.Errorf("--%s %s: jwt[%d] (%s): %w", Flag, path, i, j.Issuer.URL, err)
		}
		p.each = append(p.each, t)
		p.issuers = append(p.issuers, j.Issuer.URL)
		p.entries = append(p.entries, j)
		toks = append(toks, t)
	}
	p.union = tokenunion.New(toks...)
	return p, nil
}

// await waits up to within for every provider's keys.
func (p *providers) await(ctx context.Context, within time.Duration) {
	waitCtx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_ = wait.PollUntilContextCancel(waitCtx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return p.healthCheck() == nil, nil
	})
}

func (p *providers) healthCheck() error {
	var errs []error
	for _, t := range p.each {
		if err := t.HealthCheck(); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}

// HealthCheck says which providers' keys are not loaded yet.
func (a *Authenticator) HealthCheck() error { return a.current.Load().healthCheck() }

// Issuer is the file's entry for issuer: its CA (PEM, empty for the
// system's roots) and the audiences its tokens may be for.
func (a *Authenticator) Issuer(issuer string) (ca []byte, audiences []string, ok bool) {
	for _, j := range a.current.Load().entries {
		if j.Issuer.URL == issuer {
			return []byte(j.Issuer.CertificateAuthority), j.Issuer.Audiences, true
		}
	}
	return nil, nil, false
}

// Issuers are the configured providers' issuer URLs.
func (a *Authenticator) Issuers() []string { return append([]string(nil), a.current.Load().issuers...) }

// AuthenticateToken implements authenticator.Token. A bearer token that
// is not a JWT is not this authenticator's (join tokens are someone
// else's). A JWT is either a user, or refused with an error that says why:
// the API server logs it ("Unable to authenticate the request") and
// answers 401. The error never holds the token.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	iss, isJWT := unverifiedIssuer(token)
	if !isJWT {
		return nil, false, nil
	}
	p := a.current.Load()
	resp, ok, err := p.union.AuthenticateToken(ctx, token)
	if err != nil {
		return nil, false, fmt.Errorf("ID token from issuer %q refused: %w", iss, err)
	}
	if !ok {
		return nil, false, fmt.Errorf("ID token refused: its issuer %q is none of the providers in --%s %s (%s)", iss, Flag, a.Path, strings.Join(p.issuers, ", "))
	}
	if err := caller.CheckExternal(resp.User); err != nil {
		return nil, false, fmt.Errorf("ID token from issuer %q refused: %w; map the provider's claims with a prefix in --%s", iss, err, Flag)
	}
	return resp, true, nil
}

// unverifiedIssuer reads the iss claim of what looks like a JWT (three
// dot-separated base64url parts, the middle one a JSON object), only to
// say in a refusal whose token it was; nothing is decided on it.
func unverifiedIssuer(token string) (string, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", false
	}
	var claims struct {
		Iss any `json:"iss"`
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		return "", false
	}
	iss, _ := claims.Iss.(string)
	return iss, true
}

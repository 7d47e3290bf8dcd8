package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/klog/v2"
)

// Paths of the console's sign-in with an identity provider (OIDC).
const (
	// OIDCProviderPath tells the sign-in page whether to offer it, and
	// under which name.
	OIDCProviderPath = "/console/oidc/provider"
	// OIDCStartPath sends the browser to the provider.
	OIDCStartPath = "/console/oidc/start"
	// OIDCCallbackPath is the redirect URI registered with the provider:
	// https://<the console's host>/console/oidc/callback.
	OIDCCallbackPath = "/console/oidc/callback"
)

// oidcCookie carries one sign-in's state, nonce and PKCE verifier from
// the start to the callback. SameSite=Lax: the provider's redirect back
// is a cross-site top-level navigation, which carries Lax cookies only.
const oidcCookie = "muster_console_oidc"

// oidcFlowTTL bounds how long a person may take at the provider.
const oidcFlowTTL = 10 * time.Minute

// OIDC is the console's "Sign in with <provider>": authorization code
// with PKCE (S256), state and nonce checked, then a console session as a
// console token's. The ID token is judged by the same authenticator as
// the API's bearer tokens (k8s.io/apiserver's JWT authenticator with the
// server's --authentication-config), so the session's user and groups
// are those kubectl would have with that token.
type OIDC struct {
	// Name is shown on the button: "Sign in with <Name>".
	Name string
	// Issuer, ClientID and ClientSecret (empty for a public client) are
	// the provider and the console's client there.
	Issuer, ClientID, ClientSecret string
	// CAPEM is the provider's CA (empty: the system's roots).
	CAPEM []byte
	// Verify judges the ID token: the API's ID token authenticator.
	Verify authenticator.Token
	// SessionTTL is how long the console session lasts.
	SessionTTL time.Duration
}

// random is 32 bytes from crypto/rand, base64url: no dots, so three fit
// in one cookie value split on ".".
func random() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func (o *OIDC) client() *http.Client {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(o.CAPEM) > 0 {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(o.CAPEM)
		cfg.RootCAs = pool
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}}
}

// config reads the provider's discovery document for its endpoints.
func (o *OIDC) config(ctx context.Context, hc *http.Client, redirect string) (*oauth2.Config, error) {
	url := strings.TrimSuffix(o.Issuer, "/") + "/.well-known/openid-configuration"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the identity provider's discovery document %s: %w", url, err)
	}
	defer resp.Body.Close()
	var doc struct {
		Issuer        string `json:"issuer"`
		Authorization string `json:"authorization_endpoint"`
		Token         string `json:"token_endpoint"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the identity provider's discovery document %s answered %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, fmt.Errorf("the identity provider's discovery document %s: %w", url, err)
	}
	if strings.TrimSuffix(doc.Issuer, "/") != strings.TrimSuffix(o.Issuer, "/") {
		return nil, fmt.Errorf("the identity provider at %s calls itself %q", o.Issuer, doc.Issuer)
	}
	style := oauth2.AuthStyleInParams
	if o.ClientSecret != "" {
		style = oauth2.AuthStyleInHeader
	}
	return &oauth2.Config{
		ClientID: o.ClientID, ClientSecret: o.ClientSecret, RedirectURL: redirect,
		Scopes:   []string{"openid", "profile", "email", "groups"},
		Endpoint: oauth2.Endpoint{AuthURL: doc.Authorization, TokenURL: doc.Token, AuthStyle: style},
	}, nil
}

// redirectURI is the callback on the host the browser reached the
// console at; the provider sends the browser back only to a registered
// one, so a forged Host header leads nowhere.
func redirectURI(r *http.Request) string { return "https://" + r.Host + OIDCCallbackPath }

func (c *Console) oidcProvider(w http.ResponseWriter, _ *http.Request) {
	if c.OIDC == nil {
		fail(w, http.StatusNotFound, "this server signs nobody in with an identity provider: start it with --authentication-config and --console-oidc-client-id")
		return
	}
	writeJSON(w, map[string]string{"name": c.OIDC.Name, "start": OIDCStartPath})
}

// oidcStart sends the browser to the provider with a fresh state, nonce
// and PKCE challenge; the cookie keeps them for the callback.
func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	o := c.OIDC
	if o == nil {
		fail(w, http.StatusNotFound, "this server signs nobody in with an identity provider: sign in with a console token")
		return
	}
	if wait := c.Sessions.allowSignIn(r); wait > 0 {
		fail(w, http.StatusTooManyRequests, "too many sign-in attempts from this address; retry in a few seconds")
		return
	}
	cfg, err := o.config(r.Context(), o.client(), redirectURI(r))
	if err != nil {
		klog.InfoS("Console sign-in with the identity provider failed", "issuer", o.Issuer, "reason", err.Error())
		oidcPage(w, http.StatusBadGateway, "The identity provider cannot be reached: "+err.Error())
		return
	}
	state, nonce, verifier := random(), random(), oauth2.GenerateVerifier()
	http.SetCookie(w, &http.Cookie{
		Name: oidcCookie, Value: state + "." + nonce + "." + verifier, Path: "/console/oidc/",
		MaxAge: int(oidcFlowTTL.Seconds()), HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode,
	})
	http.Redirect(w, r, cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)), http.StatusFound)
}

// oidcCallback takes the provider's answer: the state must be the one
// this browser's cookie holds (else it is another's sign-in, or a forged
// one), the code is exchanged with the PKCE verifier, the ID token is
// judged by the API's authenticator and must carry this sign-in's nonce.
// Then the browser holds a console session like a console token's.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	o := c.OIDC
	if o == nil {
		fail(w, http.StatusNotFound, "this server signs nobody in with an identity provider: sign in with a console token")
		return
	}
	// The flow's cookie serves one callback, whatever its outcome.
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: "", Path: "/console/oidc/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	refuse := func(code int, reason string) {
		klog.InfoS("Console sign-in with the identity provider refused", "issuer", o.Issuer, "remote", r.RemoteAddr, "reason", reason)
		oidcPage(w, code, "Sign-in refused: "+reason)
	}
	q := r.URL.Query()
	ck, err := r.Cookie(oidcCookie)
	if err != nil {
		refuse(http.StatusBadRequest, "this browser started no sign-in here (or took longer than "+oidcFlowTTL.String()+"); start again from the console's sign-in page")
		return
	}
	parts := strings.Split(ck.Value, ".")
	if len(parts) != 3 || subtle.ConstantTimeCompare([]byte(parts[0]), []byte(q.Get("state"))) != 1 {
		refuse(http.StatusBadRequest, "the answer's state is not the one this browser's sign-in started with; start again from the console's sign-in page")
		return
	}
	nonce, verifier := parts[1], parts[2]
	if e := q.Get("error"); e != "" {
		refuse(http.StatusUnauthorized, "the identity provider answered "+e+": "+q.Get("error_description"))
		return
	}
	hc := o.client()
	cfg, err := o.config(r.Context(), hc, redirectURI(r))
	if err != nil {
		refuse(http.StatusBadGateway, err.Error())
		return
	}
	tok, err := cfg.Exchange(context.WithValue(r.Context(), oauth2.HTTPClient, hc), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		refuse(http.StatusUnauthorized, "exchanging the code at the identity provider: "+err.Error())
		return
	}
	idToken, _ := tok.Extra("id_token").(string)
	if idToken == "" {
		refuse(http.StatusUnauthorized, "the identity provider answered without an ID token")
		return
	}
	resp, ok, err := o.Verify.AuthenticateToken(r.Context(), idToken)
	if err == nil && !ok {
		err = errors.New("the server's --authentication-config does not accept it")
	}
	if err != nil {
		refuse(http.StatusUnauthorized, err.Error())
		return
	}
	// The token is verified: its nonce is read from it as issued.
	if got := payloadClaim(idToken, "nonce"); subtle.ConstantTimeCompare([]byte(got), []byte(nonce)) != 1 {
		refuse(http.StatusUnauthorized, "the ID token's nonce is not this sign-in's (a token replayed from another sign-in)")
		return
	}
	u := resp.User
	exp := c.Now().Add(o.SessionTTL).UTC().Truncate(time.Second)
	id, err := c.Sessions.Create(r.Context(), Session{User: u.GetName(), Groups: u.GetGroups(), Expires: exp})
	if err != nil {
		klog.ErrorS(err, "Console sign-in: storing the session failed", "user", u.GetName())
		oidcPage(w, http.StatusServiceUnavailable, "The session could not be stored in the datastore; sign in again in a few seconds.")
		return
	}
	http.SetCookie(w, c.cookie(id, exp))
	klog.InfoS("Console sign-in", "user", u.GetName(), "groups", u.GetGroups(), "expires", exp, "issuer", o.Issuer)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

func payloadClaim(jwt, name string) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c map[string]any
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	s, _ := c[name].(string)
	return s
}

// oidcPage is a page for the person at the browser (these paths are
// navigations, not API calls): the message, and the way back.
func oidcPage(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintf(w, "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Muster console</title><link rel=\"stylesheet\" href=\"/console/app.css\"></head><body><main><p id=\"oidc-error\" class=\"error\">%s</p><p><a href=\"%s\">Back to the sign-in page</a></p></main></body></html>",
		html.EscapeString(msg), Prefix)
}

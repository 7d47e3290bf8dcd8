package server

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/muster-io/muster/internal/console"
	"github.com/muster-io/muster/internal/oidcauthn"
)

// ConsoleOIDC is the console's sign-in with an identity provider, one
// field per flag (--console-oidc-*).
type ConsoleOIDC struct {
	// ClientID is the console's client at the provider; empty offers no
	// such sign-in.
	ClientID string
	// Issuer is the provider, one of --authentication-config's; empty
	// when the file names only one.
	Issuer string
	// ClientSecretFile holds the client's secret; empty for a public
	// client (PKCE protects the code either way).
	ClientSecretFile string
	// Name is the provider's name on the button; empty is its host.
	Name string
	// SessionTTL is how long a console session started this way lasts.
	SessionTTL time.Duration
}

// build checks the flags against the authentication file and returns the
// console's sign-in, nil when none is asked for.
func (c ConsoleOIDC) build(a *oidcauthn.Authenticator) (*console.OIDC, error) {
	if c.ClientID == "" {
		return nil, nil
	}
	issuer := c.Issuer
	if issuer == "" {
		if len(a.Issuers()) != 1 {
			return nil, fmt.Errorf("--%s names %d providers: give --console-oidc-issuer, one of %s", oidcauthn.Flag, len(a.Issuers()), strings.Join(a.Issuers(), ", "))
		}
		issuer = a.Issuers()[0]
	}
	ca, audiences, ok := a.Issuer(issuer)
	if !ok {
		return nil, fmt.Errorf("--console-oidc-issuer %s is not a provider of --%s (%s): the console signs in only with a provider whose tokens the server accepts", issuer, oidcauthn.Flag, strings.Join(a.Issuers(), ", "))
	}
	if !slices.Contains(audiences, c.ClientID) {
		return nil, fmt.Errorf("--console-oidc-client-id %s is not among the audiences of %s in --%s (%s): add it there, or the console's ID tokens would be refused", c.ClientID, issuer, oidcauthn.Flag, strings.Join(audiences, ", "))
	}
	if c.SessionTTL <= 0 || c.SessionTTL > console.MaxTTL {
		return nil, fmt.Errorf("--console-oidc-session-ttl %s is out of range: give a duration between 1s and %s", c.SessionTTL, console.MaxTTL)
	}
	var secret string
	if c.ClientSecretFile != "" {
		b, err := os.ReadFile(c.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--console-oidc-client-secret-file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	name := c.Name
	if name == "" {
		if u, err := url.Parse(issuer); err == nil {
			name = u.Host
		}
	}
	return &console.OIDC{Name: name, Issuer: issuer, ClientID: c.ClientID, ClientSecret: secret, CAPEM: ca, Verify: a, SessionTTL: c.SessionTTL}, nil
}

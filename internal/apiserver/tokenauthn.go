package apiserver

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/muster-io/muster/internal/identity"
	"github.com/muster-io/muster/internal/jointoken"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// TokenAuthenticator recognises join tokens ("<id>.<secret>") as bearer
// tokens. It reads tokens from an informer's cache, so a check costs no
// datastore round trip; the cache is set once informers have synced.
type TokenAuthenticator struct {
	tokens atomic.Pointer[listers.ClusterRegistrationTokenLister]
	client atomic.Pointer[versioned.Interface]
	now    func() time.Time
}

// NewTokenAuthenticator returns an authenticator that accepts nothing until SetLister.
func NewTokenAuthenticator() *TokenAuthenticator {
	return &TokenAuthenticator{now: time.Now}
}

// SetLister gives the authenticator its token cache, and the client it reads
// through when the cache has not seen a token yet.
func (a *TokenAuthenticator) SetLister(l listers.ClusterRegistrationTokenLister, c versioned.Interface) {
	a.client.Store(&c)
	a.tokens.Store(&l)
}

// AuthenticateToken implements authenticator.Token. A wrong secret or an
// unknown id is simply not authenticated (401, nothing revealed). A right
// secret of an expired or revoked token authenticates into a group that may
// do nothing, so the 403 can tell the operator why.
func (a *TokenAuthenticator) AuthenticateToken(ctx context.Context, value string) (*authenticator.Response, bool, error) {
	tok, err := jointoken.Parse(value)
	if err != nil || tok.CAHash != "" {
		return nil, false, nil
	}
	l := a.tokens.Load()
	if l == nil {
		return nil, false, fmt.Errorf("join tokens are not loaded yet; retry in a few seconds")
	}
	obj, err := (*l).Get(tok.ID)
	if apierrors.IsNotFound(err) {
		// A token created a moment ago may not be in the cache yet.
		obj, err = (*a.client.Load()).MusterV1alpha1().ClusterRegistrationTokens().Get(ctx, tok.ID, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !jointoken.VerifySecret(obj.Spec.SecretHash, tok.Secret) {
		return nil, false, nil
	}
	info := &user.DefaultInfo{Name: identity.BootstrapUser(tok.ID), Groups: []string{identity.BootstrappersGroup}}
	if why := inactive(obj, a.now()); why != "" {
		info.Groups = []string{identity.InactiveBootstrappersGroup}
		info.Extra = map[string][]string{identity.ReasonExtra: {why}}
	}
	return &authenticator.Response{User: info}, true, nil
}

// inactive says why a token may not be used, or "" when it may.
func inactive(t *api.ClusterRegistrationToken, now time.Time) string {
	switch {
	case t.Status.Phase == api.TokenPhaseRevoked:
		return fmt.Sprintf("join token %s was revoked", t.Name)
	case t.Status.Phase == api.TokenPhaseExpired:
		return fmt.Sprintf("join token %s has expired", t.Name)
	case t.Status.ExpiresAt != nil && !now.Before(t.Status.ExpiresAt.Time):
		return fmt.Sprintf("join token %s expired at %s", t.Name, t.Status.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return ""
}

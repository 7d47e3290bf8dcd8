package jointoken

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// CreateOptions are what an operator chooses for a new token.
type CreateOptions struct {
	TTL            time.Duration
	Cluster        string
	ManualApproval bool
	Description    string
	// MaxUses bounds the registrations the token may be granted for; 0 is no bound.
	MaxUses int32
}

// Create makes a ClusterRegistrationToken holding only the secret's hash and
// returns the full token, to be shown once. The CA pin is the hash of what
// the server serves on /cacerts, exactly what an agent will check.
func Create(ctx context.Context, c musterclient.MusterV1alpha1Interface, opts CreateOptions) (Token, error) {
	ca, err := c.RESTClient().Get().AbsPath("/cacerts").DoRaw(ctx)
	if err != nil {
		return Token{}, fmt.Errorf("reading the server's CA from /cacerts: %w", err)
	}
	if opts.Cluster != "" {
		if _, err := c.Clusters().Get(ctx, opts.Cluster, metav1.GetOptions{}); err != nil {
			return Token{}, fmt.Errorf("cluster %q: %w; create it first or omit --cluster", opts.Cluster, err)
		}
	}
	for attempt := 0; ; attempt++ {
		tok, err := Generate(pki.Hash(ca))
		if err != nil {
			return Token{}, err
		}
		obj := &api.ClusterRegistrationToken{
			ObjectMeta: metav1.ObjectMeta{Name: tok.ID},
			Spec: api.ClusterRegistrationTokenSpec{
				Cluster:        opts.Cluster,
				ManualApproval: opts.ManualApproval,
				SecretHash:     HashSecret(tok.Secret),
				Description:    opts.Description,
				MaxUses:        opts.MaxUses,
			},
		}
		if opts.TTL > 0 {
			obj.Spec.TTL = &metav1.Duration{Duration: opts.TTL}
		}
		_, err = c.ClusterRegistrationTokens().Create(ctx, obj, metav1.CreateOptions{})
		if errors.IsAlreadyExists(err) && attempt < 3 {
			continue // a random id collided; draw another
		}
		if err != nil {
			return Token{}, fmt.Errorf("creating the token: %w", err)
		}
		return tok, nil
	}
}

// Revoke moves a token to Revoked; registrations with it fail from then on.
// Revoking a revoked token changes nothing and is not an error, so the
// command can be retried; an expired token cannot be revoked (the state
// machine has no such move) and the server's 422 says so.
func Revoke(ctx context.Context, c musterclient.MusterV1alpha1Interface, id string) (alreadyRevoked bool, err error) {
	return RevokeFor(ctx, c, id, ReasonRevokedByOperator)
}

// Reasons a token is revoked for, recorded in its status.reason.
const (
	// ReasonRevokedByOperator: 'muster-server token revoke'.
	ReasonRevokedByOperator = "RevokedByOperator"
	// ReasonClusterDeleted: the Cluster it is bound to was deleted.
	ReasonClusterDeleted = "ClusterDeleted"
)

// RevokeFor is Revoke, recording reason (one of the Reason constants).
func RevokeFor(ctx context.Context, c musterclient.MusterV1alpha1Interface, id, reason string) (alreadyRevoked bool, err error) {
	tokens := c.ClusterRegistrationTokens()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		t, err := tokens.Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("token %q: %w (list tokens with 'muster-server token list')", id, err)
		}
		if t.Status.Phase == api.TokenPhaseRevoked {
			alreadyRevoked = true
			return nil
		}
		t.Status.Phase = api.TokenPhaseRevoked
		t.Status.Reason = reason
		_, err = tokens.UpdateStatus(ctx, t, metav1.UpdateOptions{})
		return err
	})
	return alreadyRevoked, err
}

// List prints every token as a table.
func List(ctx context.Context, c musterclient.MusterV1alpha1Interface, w io.Writer) error {
	list, err := c.ClusterRegistrationTokens().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing tokens: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPHASE\tCLUSTER\tAPPROVAL\tEXPIRES\tUSES\tDESCRIPTION")
	for _, t := range list.Items {
		cluster, approval, expires := t.Spec.Cluster, "auto", "never"
		if cluster == "" {
			cluster = "<own>"
		}
		if t.Spec.ManualApproval {
			approval = "manual"
		}
		if t.Status.ExpiresAt != nil {
			expires = t.Status.ExpiresAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Status.Phase, cluster, approval, expires, Uses(&t), t.Spec.Description)
	}
	return tw.Flush()
}

// Uses says how many registrations a token made of how many it may:
// "1/1 (used up)" for a spent single-use token, which is still Active
// (its phase says whether it may be used at all, not whether uses are
// left), "3/unlimited" for one without a limit.
func Uses(t *api.ClusterRegistrationToken) string {
	if t.Spec.MaxUses <= 0 {
		return fmt.Sprintf("%d/unlimited", t.Status.Registrations)
	}
	s := fmt.Sprintf("%d/%d", t.Status.Registrations, t.Spec.MaxUses)
	if t.Status.Registrations >= t.Spec.MaxUses {
		s += " (used up)"
	}
	return s
}

// Inactive says why a join token may not be used, or "" when it may: the
// authenticator (so the 403 can say why) and every grant ask the same.
func Inactive(t *api.ClusterRegistrationToken, now time.Time) string {
	switch {
	case t.Status.Phase == api.TokenPhaseRevoked && t.Status.Reason == ReasonClusterDeleted:
		return fmt.Sprintf("join token %s was revoked when its cluster %s was deleted", t.Name, t.Spec.Cluster)
	case t.Status.Phase == api.TokenPhaseRevoked:
		return fmt.Sprintf("join token %s was revoked", t.Name)
	case t.Status.Phase == api.TokenPhaseExpired:
		return fmt.Sprintf("join token %s has expired", t.Name)
	case t.Status.ExpiresAt != nil && !now.Before(t.Status.ExpiresAt.Time):
		return fmt.Sprintf("join token %s expired at %s", t.Name, t.Status.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return ""
}

package validation

import (
	"crypto/x509"
	"fmt"
	"net/url"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Bounds of a subscription's fields.
const (
	minSigningKey = 32
	maxSigningKey = 512
	maxURL        = 2048
)

// ValidateNotificationSubscription checks where a subscription sends and
// what with: an https URL, known transitions, a signing key long enough to
// be one (and not the redacted marker a viewer reads), a bounded queue.
func ValidateNotificationSubscription(s *api.NotificationSubscription) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	u, err := url.Parse(s.Spec.URL)
	switch {
	case s.Spec.URL == "":
		errs = append(errs, field.Required(spec.Child("url"), "the receiver's https:// URL"))
	case len(s.Spec.URL) > maxURL:
		errs = append(errs, field.TooLong(spec.Child("url"), "", maxURL))
	case err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil:
		errs = append(errs, field.Invalid(spec.Child("url"), s.Spec.URL, "must be an https:// URL with a host and no user:password (events are signed, and sent only over TLS)"))
	}
	if s.Spec.CABundle != "" {
		if len(s.Spec.CABundle) > maxPEMBytes {
			errs = append(errs, field.TooLong(spec.Child("caBundle"), "", maxPEMBytes))
		} else if !x509.NewCertPool().AppendCertsFromPEM([]byte(s.Spec.CABundle)) {
			errs = append(errs, field.Invalid(spec.Child("caBundle"), "", "holds no PEM certificate (BEGIN CERTIFICATE): give the CA of the receiver's certificate, or leave it empty for the host's trusted roots"))
		}
	}
	known := sets.New(api.NotificationEvents...)
	if len(s.Spec.Events) == 0 {
		errs = append(errs, field.Required(spec.Child("events"), fmt.Sprintf("the transitions to send, some of %v", api.NotificationEvents)))
	}
	seen := sets.New[api.NotificationEvent]()
	for i, e := range s.Spec.Events {
		p := spec.Child("events").Index(i)
		if !known.Has(e) {
			errs = append(errs, field.NotSupported(p, e, api.NotificationEvents))
		} else if seen.Has(e) {
			errs = append(errs, field.Duplicate(p, e))
		}
		seen.Insert(e)
	}
	key := spec.Child("signingKey")
	switch {
	case s.Spec.SigningKey == api.Redacted:
		errs = append(errs, field.Invalid(key, api.Redacted, `is what a caller who may not read the signing key reads in its place (`+api.Redacted+`): write the real key`))
	case len(s.Spec.SigningKey) < minSigningKey:
		errs = append(errs, field.Invalid(key, "", fmt.Sprintf("must be at least %d characters (e.g. openssl rand -hex 32): the receiver checks each event's HMAC with it", minSigningKey)))
	case len(s.Spec.SigningKey) > maxSigningKey:
		errs = append(errs, field.TooLong(key, "", maxSigningKey))
	}
	if q := s.Spec.MaxQueued; q < 0 || q > api.MaxNotificationQueue {
		errs = append(errs, field.Invalid(spec.Child("maxQueued"), q, fmt.Sprintf("must be 0 (the default, %d) to %d: each queued event is held in the server's memory", api.DefaultNotificationQueue, api.MaxNotificationQueue)))
	}
	return errs
}

// ValidateNotificationSubscriptionStatusUpdate checks the counters the
// server writes.
func ValidateNotificationSubscriptionStatusUpdate(s, _ *api.NotificationSubscription) field.ErrorList {
	var errs field.ErrorList
	st := field.NewPath("status")
	for _, c := range []struct {
		v int64
		p *field.Path
	}{{s.Status.Delivered, st.Child("delivered")}, {s.Status.Dropped, st.Child("dropped")}, {int64(s.Status.Queued), st.Child("queued")}} {
		if c.v < 0 {
			errs = append(errs, field.Invalid(c.p, c.v, "must not be negative"))
		}
	}
	if len(s.Status.LastError) > 1024 {
		errs = append(errs, field.TooLong(st.Child("lastError"), "", 1024))
	}
	return errs
}

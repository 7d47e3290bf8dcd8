package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// refused reports whether the server judged the credential and said no: a
// 401 or 403 is its final word on a token or certificate, and retrying the
// same credential cannot change it.
func refused(err error) bool {
	return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
}

// transient reports whether err may go away by itself: no answer at all
// (connection refused or reset, a server restarting), or an answer that
// says to come back (429, 503 and the other 5xx).
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == 429 || code >= 500 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
	}
	return true
}

// maxRetryAfter bounds the wait a server's Retry-After may ask for.
const maxRetryAfter = 5 * time.Minute

// retryWait is how long to wait before trying again after err: what the
// server asked for in Retry-After (a server loading its caches or shedding
// load knows best), else backoff with jitter, so a fleet restarting
// together does not retry in lockstep.
func retryWait(err error, backoff time.Duration) time.Duration {
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		// Bounded: whatever answers at the server's address must not
		// stall a join or a renewal for hours.
		d := min(time.Duration(s)*time.Second, maxRetryAfter)
		return d + rand.N(d/10+1)
	}
	if backoff <= 0 {
		backoff = time.Second
	}
	return backoff/2 + rand.N(backoff)
}

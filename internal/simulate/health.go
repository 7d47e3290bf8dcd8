package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// health is what the fleet saw of the server: failed requests by kind,
// and each outage from the first failure after a success to the next
// success. A load test of a deployment is also a test of its failover,
// and this is its account.
type health struct {
	mu        sync.Mutex
	errors    map[string]int
	downSince time.Time
	downKind  string
	outages   []time.Duration
	// say, if set, is told when the server is lost and when it is back.
	say func(format string, args ...interface{})
}

// ok records a request the server answered.
func (h *health) ok() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.downSince.IsZero() {
		return
	}
	d := time.Since(h.downSince)
	h.outages = append(h.outages, d)
	h.downSince = time.Time{}
	if h.say != nil {
		h.say("the server answers again after %s (first failure: %s)", d.Round(time.Millisecond), h.downKind)
	}
}

// observe records the outcome of a request: a conflict or a missing
// object is an answer too.
func (h *health) observe(err error) {
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		h.ok()
		return
	}
	h.failed(err)
}

// failed records a request that failed; a cancelled one is not the server's doing.
func (h *health) failed(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	kind := errorKind(err)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errors == nil {
		h.errors = map[string]int{}
	}
	h.errors[kind]++
	if h.downSince.IsZero() {
		h.downSince, h.downKind = time.Now(), kind
		if h.say != nil {
			h.say("lost the server: %s (%v)", kind, err)
		}
	}
}

// Health is what the fleet saw: failed requests by kind, and how long
// each outage lasted until the server answered again (the one still going
// on, if any, is not among them).
type Health struct {
	Errors  map[string]int
	Outages []time.Duration
	// Down is how long the current outage has lasted; zero if none.
	Down time.Duration
}

func (h *health) snapshot() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Health{Errors: map[string]int{}, Outages: append([]time.Duration(nil), h.outages...)}
	for k, v := range h.errors {
		s.Errors[k] = v
	}
	if !h.downSince.IsZero() {
		s.Down = time.Since(h.downSince)
	}
	return s
}

// String is the account printed in the summaries, e.g.
// "errors: connection refused 40, HTTP 503 3; 1 outage, recovered in max 4.2s".
func (s Health) String() string {
	if len(s.Errors) == 0 {
		return "no errors"
	}
	kinds := make([]string, 0, len(s.Errors))
	for k := range s.Errors {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return s.Errors[kinds[i]] > s.Errors[kinds[j]] })
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Errors[k]))
	}
	line := "errors: " + strings.Join(parts, ", ")
	if n := len(s.Outages); n > 0 {
		longest := s.Outages[0]
		for _, d := range s.Outages {
			longest = max(longest, d)
		}
		line += fmt.Sprintf("; %d outage(s), time to recover max %s", n, longest.Round(time.Millisecond))
	}
	if s.Down > 0 {
		line += fmt.Sprintf("; server not answering for %s", s.Down.Round(time.Millisecond))
	}
	return line
}

// errorKind names a failure the way an operator reads it.
func errorKind(err error) string {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status) && status.Status().Code != 0:
		return fmt.Sprintf("HTTP %d", status.Status().Code)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout"
	}
	return "other"
}

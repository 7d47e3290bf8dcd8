package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// queued is an event waiting for one subscription's receiver.
type queued struct {
	event    Event
	seq      uint64
	enqueued time.Time
}

// target is where and how a subscription sends, from its spec.
type target struct {
	url    string
	key    []byte
	client *http.Client
}

// subscriber is one subscription's queue and its one delivery goroutine:
// one sender, first in first out, so events reach the receiver in the
// order they were seen (per object, and overall). The queue is bounded:
// when it is full the oldest event is dropped, so a receiver that never
// returns holds at most max events of the server's memory.
type subscriber struct {
	name   string
	source string
	obs    observer
	dest   Destinations
	// backoff: the first retry after initial, doubling up to max.
	initial, max time.Duration

	mu      sync.Mutex
	target  target
	limit   int
	queue   []queued
	seq     uint64
	status  api.NotificationSubscriptionStatus
	changed bool // status differs from what was last written
	// overflowing is set from the first drop until the queue has room
	// again: one Event per episode, not one per dropped event.
	overflowing bool
	wake        chan struct{}
}

// observer is told what happens to a subscription's events (metrics,
// Events on the subscription).
type observer interface {
	queueLength(sub string, n, limit int)
	dropped(sub string, first bool)
	delivered(sub string, latency time.Duration)
	failed(sub string, err error)
}

func newSubscriber(name, source string, obs observer, dest Destinations, initial, max time.Duration) *subscriber {
	return &subscriber{name: name, source: source, obs: obs, dest: dest, initial: initial, max: max, wake: make(chan struct{}, 1)}
}

// configure takes the subscription's spec: a new URL, key, CA or bound
// applies from the next delivery.
func (s *subscriber) configure(spec api.NotificationSubscriptionSpec) error {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if spec.CABundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(spec.CABundle)) {
			return errors.New("spec.caBundle holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	client := &http.Client{
		Timeout:   deliveryTimeout,
		Transport: s.dest.guard(&http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 1}),
		// A redirect could take the signed event elsewhere, or to plain
		// HTTP: the receiver's URL is the one the operator wrote.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	limit := int(spec.MaxQueued)
	if limit <= 0 {
		limit = api.DefaultNotificationQueue
	}
	s.mu.Lock()
	s.target = target{url: spec.URL, key: []byte(spec.SigningKey), client: client}
	s.limit = limit
	for len(s.queue) > s.limit {
		s.dropOldestLocked()
	}
	n := len(s.queue)
	s.mu.Unlock()
	s.obs.queueLength(s.name, n, limit)
	s.signal()
	return nil
}

// add queues e; it never blocks and never waits on the receiver: it is
// called from the informers' handlers.
func (s *subscriber) add(e Event) {
	s.mu.Lock()
	if len(s.queue) >= s.limit {
		s.dropOldestLocked()
	}
	s.seq++
	s.queue = append(s.queue, queued{event: e, seq: s.seq, enqueued: time.Now()})
	n, limit := len(s.queue), s.limit
	s.status.Queued, s.changed = int32(n), true
	s.mu.Unlock()
	s.obs.queueLength(s.name, n, limit)
	s.signal()
}

func (s *subscriber) dropOldestLocked() {
	// Copy down rather than reslice, so that the backing array does not
	// creep forward and grow with every append.
	copy(s.queue, s.queue[1:])
	s.queue[len(s.queue)-1] = queued{}
	s.queue = s.queue[:len(s.queue)-1]
	s.status.Dropped++
	s.changed = true
	first := !s.overflowing
	s.overflowing = true
	s.obs.dropped(s.name, first)
}

func (s *subscriber) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run delivers until ctx ends: the head of the queue until the receiver
// takes it (2xx), retrying with exponential backoff.
func (s *subscriber) run(ctx context.Context) {
	backoff := s.initial
	for {
		s.mu.Lock()
		var head *queued
		if len(s.queue) > 0 {
			h := s.queue[0]
			head = &h
		}
		t := s.target
		s.mu.Unlock()
		if head == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		err := s.send(ctx, t, *head)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = s.initial
			latency := time.Since(head.enqueued)
			s.mu.Lock()
			// The head may have been dropped while it was being sent.
			if len(s.queue) > 0 && s.queue[0].seq == head.seq {
				copy(s.queue, s.queue[1:])
				s.queue[len(s.queue)-1] = queued{}
				s.queue = s.queue[:len(s.queue)-1]
			}
			now := time.Now()
			s.status.Delivered++
			s.status.LastError = ""
			s.status.LastDelivered = &metav1.Time{Time: now}
			n, limit := len(s.queue), s.limit
			s.status.Queued = int32(n)
			if n < limit {
				s.overflowing = false
			}
			s.changed = true
			s.mu.Unlock()
			s.obs.delivered(s.name, latency)
			s.obs.queueLength(s.name, n, limit)
			continue
		}
		s.mu.Lock()
		s.status.LastError = err.Error()
		s.changed = true
		s.mu.Unlock()
		s.obs.failed(s.name, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > s.max {
			backoff = s.max
		}
	}
}

// deliveryTimeout bounds one POST to a receiver.
const deliveryTimeout = 10 * time.Second

func (s *subscriber) send(ctx context.Context, t target, q queued) error {
	body, sig, err := encode(q.event, s.source, q.seq, t.key)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building the request to %s: %w", t.url, err)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set(SignatureHeader, sig)
	resp, err := t.client.Do(req)
	if err != nil {
		// The error names the URL and what failed (refused, TLS, timeout);
		// neither the body nor the key is in it.
		return fmt.Errorf("sending to the receiver: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver at %s answered %s; the event is retried until it takes it (2xx)", t.url, resp.Status)
	}
	return nil
}

// snapshot returns the status to write, if it changed since the last.
func (s *subscriber) snapshot() (api.NotificationSubscriptionStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.changed {
		return api.NotificationSubscriptionStatus{}, false
	}
	s.changed = false
	return *s.status.DeepCopy(), true
}

// length is how many events wait.
func (s *subscriber) length() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

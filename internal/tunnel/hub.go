package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"k8s.io/klog/v2"
)

// Hub is the server's end: the tunnel of each machine whose agent is
// connected to this server, one per machine.
type Hub struct {
	// MaxStreams caps the streams one tunnel carries at once; zero means
	// DefaultMaxStreams.
	MaxStreams int
	// replyTimeout bounds how long an agent may take to accept or refuse
	// a stream.
	replyTimeout time.Duration
	// silentTimeout is how long an agent may send nothing on its tunnel
	// (not even a keepalive) before the tunnel is taken for dead.
	silentTimeout time.Duration
	// minReopen is how long a machine's tunnel must have lived before a
	// new one may replace it: an agent (or a stolen certificate) opening
	// tunnels in a loop gets 429s instead of churning the server.
	minReopen time.Duration

	mu      sync.Mutex
	tunnels map[string]*tunnel
	// closed: the server is shutting down; no tunnel is accepted.
	closed bool
}

type tunnel struct {
	machine string
	uid     string
	sess    *yamux.Session
	since   time.Time
	streams chan struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{tunnels: map[string]*tunnel{}, replyTimeout: 15 * time.Second, silentTimeout: silentTunnelTimeout, minReopen: time.Second}
}

// Errors of Open; the HTTP side maps them to status codes.
var (
	// ErrNotConnected: the machine's agent holds no tunnel to this server.
	ErrNotConnected = errors.New("the machine's agent is not connected")
	// ErrBusy: the tunnel already carries MaxStreams streams.
	ErrBusy = errors.New("the machine's tunnel carries its maximum of streams")
)

// RefusedError is the agent's own refusal of a stream, in its words.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "the agent refused: " + e.Reason }

// Close ends every tunnel and refuses new ones (503). A tunnel lasts as
// long as its agent runs, so a server shutting down must end them itself:
// its HTTP server waits for every request to finish, and waited for each
// tunnel until its shutdown timeout. The agents reconnect to another
// server, or to this one once it is back.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	open := make([]*tunnel, 0, len(h.tunnels))
	for _, t := range h.tunnels {
		open = append(open, t)
	}
	h.mu.Unlock()
	for _, t := range open {
		_ = t.sess.Close()
	}
}

// Opened is when each tunnel this hub holds opened, by machine.
func (h *Hub) Opened() map[string]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]time.Time, len(h.tunnels))
	for m, t := range h.tunnels {
		out[m] = t.since
	}
	return out
}

// OpenedAt is when machine's tunnel to this hub opened, if it has one.
func (h *Hub) OpenedAt(machine string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tunnels[machine]
	if !ok {
		return time.Time{}, false
	}
	return t.since, true
}

// Len is how many tunnels the hub holds.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.tunnels)
}

// Connected reports whether machine's agent holds a tunnel to this server.
func (h *Hub) Connected(machine string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.tunnels[machine]
	return ok
}

// Accept is the server's end of the agent's request to Path, made by the
// agent of machine name (its certificate says so): it holds the tunnel for
// as long as the request lasts. The server's HTTP side (package serve)
// authenticates and authorizes the request first.
func (h *Hub) Accept(w http.ResponseWriter, r *http.Request, name, uid string) {
	if r.Method != http.MethodPost {
		http.Error(w, "a tunnel is opened with POST", http.StatusMethodNotAllowed)
		return
	}
	h.mu.Lock()
	old, closed := h.tunnels[name], h.closed
	h.mu.Unlock()
	if closed {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "this server is shutting down: the agent opens its tunnel to another server, or to this one once it is back", http.StatusServiceUnavailable)
		return
	}
	if old != nil && time.Since(old.since) < h.minReopen {
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("machine %s opened its tunnel less than %s ago: reopening it so fast is refused; the agent retries by itself", name, h.minReopen), http.StatusTooManyRequests)
		return
	}
	rc := http.NewResponseController(w)
	// HTTP/1.1 needs this to read the body while writing the response;
	// HTTP/2 (what the agent speaks) is full-duplex already.
	_ = rc.EnableFullDuplex()
	w.Header().Set("Content-Type", "application/octet-stream")
	conn := newServerConn(r.Body, w, rc)
	// Nothing is written to the tunnel before the response's header: a
	// stream opened the moment the tunnel is registered waits for it.
	conn.mu.Lock()
	max := h.MaxStreams
	if max <= 0 {
		max = DefaultMaxStreams
	}
	sess, err := yamux.Client(conn, hubMuxConfig(max))
	if err != nil {
		conn.mu.Unlock()
		klog.ErrorS(err, "Cannot start a tunnel's multiplexer", "machine", name)
		return
	}
	silent := false
	stopWatch := conn.endWhenSilent(h.silentTimeout, func() {
		silent = true
		_ = sess.Close()
	})
	t := &tunnel{machine: name, uid: uid, sess: sess, since: time.Now(), streams: make(chan struct{}, max)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		conn.mu.Unlock()
		stopWatch()
		_ = sess.Close()
		http.Error(w, "this server is shutting down", http.StatusServiceUnavailable)
		return
	}
	old = h.tunnels[name]
	h.tunnels[name] = t
	h.mu.Unlock()
	if old != nil {
		// The agent reconnected (a new session after a renewal, or the old
		// connection died without this server noticing yet): the newer
		// tunnel is the one it reads.
		_ = old.sess.Close()
	}
	// Registered before the agent hears it is open: once it says so, the
	// machine is reachable.
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		klog.InfoS("Cannot serve a tunnel: the response cannot be flushed", "machine", name, "err", err)
	}
	conn.mu.Unlock()
	klog.V(2).InfoS("Tunnel opened", "machine", name)
	select {
	case <-sess.CloseChan():
	case <-r.Context().Done():
	}
	_ = sess.Close()
	if !stopWatch() && silent {
		klog.InfoS("Tunnel closed: nothing came from the agent, not even a keepalive; its connection is taken for dead (the agent reconnects by itself once it can)",
			"machine", name, "silentFor", h.silentTimeout)
	}
	h.mu.Lock()
	if h.tunnels[name] == t {
		delete(h.tunnels, name)
	}
	h.mu.Unlock()
	klog.V(2).InfoS("Tunnel closed", "machine", name, "after", time.Since(t.since).Round(time.Second))
}

// serverConn is the server's side of a tunnel's byte stream: the request
// body in, the flushed response body out.
type serverConn struct {
	body io.ReadCloser
	w    io.Writer
	rc   *http.ResponseController
	mu   sync.Mutex
	done bool
	// opened and heard (since opened, on the monotonic clock) tell how
	// long the agent has been silent.
	opened time.Time
	heard  atomic.Int64
}

func newServerConn(body io.ReadCloser, w io.Writer, rc *http.ResponseController) *serverConn {
	return &serverConn{body: body, w: w, rc: rc, opened: time.Now()}
}

func (c *serverConn) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	if n > 0 {
		c.heard.Store(int64(time.Since(c.opened)))
	}
	return n, err
}

// endWhenSilent calls end once nothing has been read for d; stop reports
// whether it stopped the watch before end was called.
func (c *serverConn) endWhenSilent(d time.Duration, end func()) (stop func() bool) {
	var mu sync.Mutex
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if silent := time.Since(c.opened) - time.Duration(c.heard.Load()); silent < d {
			t.Reset(d - silent)
			return
		}
		end()
	})
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return t.Stop()
	}
}

func (c *serverConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return 0, io.ErrClosedPipe
	}
	n, err := c.w.Write(p)
	if err == nil {
		err = c.rc.Flush()
	}
	return n, err
}

// Close unblocks the multiplexer's reads and writes, so that the handler
// can return; nothing is written after it.
func (c *serverConn) Close() error {
	_ = c.rc.SetWriteDeadline(time.Now())
	_ = c.body.Close()
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	return nil
}

// Stream is one stream the agent accepted.
type Stream struct {
	*yamux.Stream
	release func()
}

// Done gives back the stream's slot and resets it; call it once when the
// stream is no longer read.
func (s *Stream) Done() {
	_ = s.Stream.Close()
	_ = s.Stream.SetReadDeadline(time.Now())
	s.release()
}

// Open asks machine's agent for a stream of req's kind. It returns
// ErrNotConnected, ErrBusy, a *RefusedError, or the stream to use;
// Done must be called on it.
func (h *Hub) Open(ctx context.Context, machine string, req Request) (*Stream, error) {
	h.mu.Lock()
	t := h.tunnels[machine]
	h.mu.Unlock()
	if t == nil {
		return nil, ErrNotConnected
	}
	select {
	case t.streams <- struct{}{}:
	default:
		return nil, ErrBusy
	}
	var once sync.Once
	release := func() { once.Do(func() { <-t.streams }) }
	s, err := t.sess.OpenStream()
	if err != nil {
		release()
		if errors.Is(err, yamux.ErrSessionShutdown) {
			return nil, ErrNotConnected
		}
		return nil, fmt.Errorf("opening a stream to machine %s: %w", machine, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.SetReadDeadline(time.Now()) })
	defer stop()
	_ = s.SetReadDeadline(time.Now().Add(h.replyTimeout))
	var reply Reply
	err = writeHeader(s, req)
	if err == nil {
		err = readHeader(s, &reply)
	}
	if err != nil {
		_ = s.Close()
		release()
		return nil, fmt.Errorf("the agent of machine %s did not answer the stream request: %w", machine, err)
	}
	_ = s.SetReadDeadline(time.Time{})
	if reply.Error != "" {
		_ = s.Close()
		release()
		return nil, &RefusedError{Reason: reply.Error}
	}
	return &Stream{Stream: s, release: release}, nil
}

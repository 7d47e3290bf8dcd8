package tunnel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

func TestFrames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     byte
		payload []byte
		wantErr bool
	}{
		{"empty", FrameStdout, nil, false},
		{"stderr", FrameStderr, []byte("err\n"), false},
		{"largest", FrameStdout, bytes.Repeat([]byte("x"), MaxFrameBytes), false},
		{"too large", FrameStdout, bytes.Repeat([]byte("x"), MaxFrameBytes+1), true},
		{"exit", FrameExit, ExitFrame(-3), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := WriteFrame(&b, tc.typ, tc.payload)
			if (err != nil) != tc.wantErr {
				t.Fatalf("WriteFrame: %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			typ, payload, err := ReadFrame(&b, nil)
			if err != nil || typ != tc.typ || !bytes.Equal(payload, tc.payload) && len(tc.payload) > 0 {
				t.Fatalf("ReadFrame = %d %q %v", typ, payload, err)
			}
		})
	}
	// A frame whose header claims too much is refused before reading it.
	hdr := []byte{FrameStdout, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := ReadFrame(bytes.NewReader(hdr), nil); err == nil {
		t.Fatal("ReadFrame accepted a 4 GiB frame header")
	}
	if code, err := ExitCode(ExitFrame(7)); code != 7 || err != nil {
		t.Fatalf("ExitCode = %d, %v", code, err)
	}
}

func TestValidate(t *testing.T) {
	// ValidateCommand and ValidatePort are checked by the server, the
	// agent and the plugin alike.
	for _, tc := range []struct {
		argv []string
		ok   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"true"}, true},
		{[]string{"echo", strings.Repeat("a", MaxArgvBytes-10)}, true},
		{[]string{"echo", strings.Repeat("a", MaxArgvBytes)}, false},
	} {
		if err := ValidateCommand(tc.argv); (err == nil) != tc.ok {
			t.Errorf("ValidateCommand(%d args) = %v, want ok %v", len(tc.argv), err, tc.ok)
		}
	}
	for _, tc := range []struct {
		port string
		ok   bool
	}{{"1", true}, {"65535", true}, {"0", false}, {"70000", false}, {"-1", false}, {"x", false}, {"", false}} {
		if _, err := ValidatePort(tc.port); (err == nil) != tc.ok {
			t.Errorf("ValidatePort(%q) = %v, want ok %v", tc.port, err, tc.ok)
		}
	}
}

func TestRing(t *testing.T) {
	r := NewRing(10)
	_, _ = r.Write([]byte("aaaa\nbbbb\n"))
	_, _ = r.Write([]byte("cc"))
	_, _ = r.Write([]byte("c\n"))
	if got := string(r.Bytes()); got != "bbbb\nccc\n" {
		t.Fatalf("ring = %q", got)
	}
}

// connect runs a hub behind an HTTP/2 TLS server and an agent's client
// with policy, as machine m; it returns once the tunnel is open.
func connect(t *testing.T, h *Hub, m string, policy Policy) context.CancelFunc {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Accept(w, r, m, "uid-"+m)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &Client{Policy: policy, Say: t.Logf}
	go c.Run(ctx, srv.Client(), srv.URL)
	waitFor(t, func() bool { return h.Connected(m) })
	return cancel
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStreams(t *testing.T) {
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer web.Close()
	go func() {
		for {
			c, err := web.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }() // echo
		}
	}()
	open := web.Addr().(*net.TCPAddr).Port
	closed := freePort(t)
	ring := NewRing(1 << 10)
	_, _ = ring.Write([]byte("agent started\n"))
	h := NewHub()
	connect(t, h, "m1", Policy{AllowPorts: []int{open, closed}, Log: ring})
	connect(t, h, "noexec", Policy{DisableExec: true})

	for _, tc := range []struct {
		name, machine string
		req           Request
		refused       string // a substring of the agent's refusal
		err           error
	}{
		{"exec disabled", "noexec", Request{Kind: KindExec, Command: []string{"true"}}, "--disable-exec", nil},
		{"empty command", "m1", Request{Kind: KindExec}, "no command", nil},
		{"huge command", "m1", Request{Kind: KindExec, Command: []string{strings.Repeat("a", MaxArgvBytes)}}, "bytes", nil},
		{"port not allowed", "m1", Request{Kind: KindPortForward, Port: 1}, "not published by this agent", nil},
		{"port not listening", "m1", Request{Kind: KindPortForward, Port: closed}, "nothing answers", nil},
		{"port on a no-ports agent", "noexec", Request{Kind: KindPortForward, Port: open}, "none are", nil},
		{"log without a ring", "noexec", Request{Kind: KindLog}, "keeps no log", nil},
		{"unknown kind", "m1", Request{Kind: "shell"}, "unknown stream kind", nil},
		{"not connected", "m2", Request{Kind: KindLog}, "", ErrNotConnected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := h.Open(context.Background(), tc.machine, tc.req)
			var refused *RefusedError
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("Open = %v, want %v", err, tc.err)
				}
			case !errors.As(err, &refused) || !strings.Contains(refused.Reason, tc.refused):
				if s != nil {
					s.Done()
				}
				t.Fatalf("Open = %v, want a refusal saying %q", err, tc.refused)
			}
		})
	}

	t.Run("exec", func(t *testing.T) {
		s, err := h.Open(context.Background(), "m1", Request{Kind: KindExec, Command: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Done()
		var out, errOut bytes.Buffer
		for {
			typ, p, err := ReadFrame(s, nil)
			if err != nil {
				t.Fatal(err)
			}
			switch typ {
			case FrameStdout:
				out.Write(p)
			case FrameStderr:
				errOut.Write(p)
			case FrameExit:
				code, _ := ExitCode(p)
				if code != 3 || out.String() != "out\n" || errOut.String() != "err\n" {
					t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
				}
				return
			}
		}
	})
	t.Run("portforward", func(t *testing.T) {
		s, err := h.Open(context.Background(), "m1", Request{Kind: KindPortForward, Port: open})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Done()
		_, _ = s.Write([]byte("ping"))
		_ = s.Close() // half-close: the echo answers, then ends
		got, err := io.ReadAll(s)
		if err != nil || string(got) != "ping" {
			t.Fatalf("echo through the tunnel = %q, %v", got, err)
		}
	})
	t.Run("log", func(t *testing.T) {
		s, err := h.Open(context.Background(), "m1", Request{Kind: KindLog})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Done()
		got, _ := io.ReadAll(s)
		if string(got) != "agent started\n" {
			t.Fatalf("log = %q", got)
		}
	})
}

func TestStreamCap(t *testing.T) {
	h := NewHub()
	h.MaxStreams = 2
	connect(t, h, "m1", Policy{})
	var held []*Stream
	for range 2 {
		s, err := h.Open(context.Background(), "m1", Request{Kind: KindExec, Command: []string{"sleep", "30"}})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	if _, err := h.Open(context.Background(), "m1", Request{Kind: KindExec, Command: []string{"true"}}); !errors.Is(err, ErrBusy) {
		t.Fatalf("third stream: %v, want ErrBusy", err)
	}
	held[0].Done()
	s, err := h.Open(context.Background(), "m1", Request{Kind: KindExec, Command: []string{"true"}})
	if err != nil {
		t.Fatalf("a stream after one ended: %v", err)
	}
	s.Done()
	held[1].Done()
}

func TestNewerTunnelReplaces(t *testing.T) {
	h := NewHub()
	h.minReopen = 0
	stopFirst := connect(t, h, "m1", Policy{})
	h.mu.Lock()
	first := h.tunnels["m1"]
	h.mu.Unlock()
	connect(t, h, "m1", Policy{})
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.tunnels["m1"] != first && first.sess.IsClosed()
	})
	stopFirst()
	if !h.Connected("m1") {
		t.Fatal("the older tunnel's end removed the newer one")
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p, _ := strconv.Atoi(strings.TrimPrefix(l.Addr().String(), "127.0.0.1:"))
	return p
}

// A tunnel reopened within minReopen of the last is refused with 429, so a
// loop of reconnects cannot churn the server.
func TestReopenFlood(t *testing.T) {
	h := NewHub()
	h.minReopen = time.Hour
	connect(t, h, "m1", Policy{})
	w := httptest.NewRecorder()
	h.Accept(w, httptest.NewRequest(http.MethodPost, Path, nil), "m1", "uid-m1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "reopening it so fast") {
		t.Fatalf("a tunnel reopened at once: %d %q", w.Code, w.Body.String())
	}
	if !h.Connected("m1") {
		t.Fatal("the refused reopen closed the open tunnel")
	}
}

// A user who goes away (the server ends the stream) kills the command on
// the machine: nothing keeps running unseen.
func TestExecKilledWhenStreamEnds(t *testing.T) {
	h := NewHub()
	connect(t, h, "m1", Policy{})
	s, err := h.Open(context.Background(), "m1", Request{Kind: KindExec, Command: []string{"sh", "-c", "echo $$; exec sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	typ, p, err := ReadFrame(s, nil)
	if err != nil || typ != FrameStdout {
		t.Fatalf("first frame: %d %q %v", typ, p, err)
	}
	pid := strings.TrimSpace(string(p))
	if _, err := os.Stat("/proc/" + pid); err != nil {
		t.Fatalf("the command (pid %s) is not running: %v", pid, err)
	}
	s.Done()
	waitFor(t, func() bool {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		// Gone, or a zombie awaiting its parent's wait.
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

// A server shutting down ends its tunnels (its HTTP server would otherwise
// wait for each until its shutdown timeout) and refuses new ones.
func TestCloseEndsTunnels(t *testing.T) {
	h := NewHub()
	h.minReopen = 0
	connect(t, h, "m1", Policy{})
	h.mu.Lock()
	first := h.tunnels["m1"]
	h.mu.Unlock()
	h.Close()
	waitFor(t, func() bool { return first.sess.IsClosed() && !h.Connected("m1") })
	w := httptest.NewRecorder()
	h.Accept(w, httptest.NewRequest(http.MethodPost, Path, nil), "m2", "uid-m2")
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "shutting down") {
		t.Fatalf("a tunnel opened during shutdown: %d %q, want 503", w.Code, w.Body.String())
	}
}

// The hub sends no keepalives of its own: an agent that keeps sending
// its own keeps its tunnel, and one that falls silent (its connection
// died where neither end saw it) loses it, so that the server stops
// offering a machine it cannot reach.
func TestSilentTunnelEnds(t *testing.T) {
	h := NewHub()
	h.silentTimeout = 300 * time.Millisecond
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Accept(w, r, r.URL.Query().Get("m"), "uid")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	agent := func(machine string, keepAlive bool) {
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.Close() })
		req, _ := http.NewRequest(http.MethodPost, srv.URL+Path+"?m="+machine, pr)
		resp, err := srv.Client().Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("opening %s's tunnel: %v %v", machine, resp, err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		cfg := muxConfig()
		cfg.EnableKeepAlive = keepAlive
		cfg.KeepAliveInterval = 50 * time.Millisecond
		sess, err := yamux.Server(&clientConn{r: resp.Body, w: pw}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sess.Close() })
		go func() { _ = (&Client{}).Serve(context.Background(), sess) }()
	}
	agent("alive", true)
	agent("silent", false)
	waitFor(t, func() bool { return !h.Connected("silent") })
	time.Sleep(3 * h.silentTimeout)
	if !h.Connected("alive") {
		t.Fatal("the hub ended the tunnel of an agent that sends its keepalives")
	}
	if s, err := h.Open(context.Background(), "alive", Request{Kind: KindLog}); !errors.As(err, new(*RefusedError)) {
		t.Fatalf("a stream on the live tunnel: %v %v; want the agent's refusal (it keeps no log)", s, err)
	}
}

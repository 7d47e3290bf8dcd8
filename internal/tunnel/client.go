package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Policy is what an agent lets the server reach on its machine; its flags
// set it, and nothing the server sends can widen it.
type Policy struct {
	// DisableExec refuses every exec (--disable-exec).
	DisableExec bool
	// ExecRefusal, if set, is why exec is disabled, told to whoever asks
	// instead of the words for --disable-exec (the agent inside
	// muster-server names the server's flag that allows it).
	ExecRefusal string
	// AllowPorts are the loopback ports a port-forward may reach
	// (--allow-port, repeatable); none by default.
	AllowPorts []int
	// PortsFlag names the flag that publishes ports, for a refusal;
	// "--allow-port" when empty.
	PortsFlag string
	// KubeAPIPort is the loopback port of the machine's kube-apiserver
	// that the server's proxy of the cluster's API may reach
	// (--kube-apiserver-port); zero refuses it.
	KubeAPIPort int
	// Log is the agent's recent log, served to `kubectl muster logs`.
	Log *Ring
}

func (p Policy) execRefusal() string {
	if p.ExecRefusal != "" {
		return p.ExecRefusal
	}
	return "exec is disabled on this machine: its agent runs with --disable-exec (restart muster-agent without it to allow exec)"
}

func (p Policy) portsFlag() string {
	if p.PortsFlag != "" {
		return p.PortsFlag
	}
	return "--allow-port"
}

// String says what the policy lets through, for the agent's log.
func (p Policy) String() string {
	exec := "exec allowed"
	switch {
	case p.DisableExec && p.ExecRefusal != "":
		exec = "exec disabled (" + p.ExecRefusal + ")"
	case p.DisableExec:
		exec = "exec disabled (--disable-exec)"
	}
	kubeAPI := "none"
	if p.KubeAPIPort != 0 {
		kubeAPI = strconv.Itoa(p.KubeAPIPort)
	}
	return fmt.Sprintf("%s; port-forward to loopback ports: %s; the cluster's API proxy to loopback port: %s", exec, strings.TrimPrefix(allowed(p.AllowPorts), "allowed: "), kubeAPI)
}

// Client is the agent's end: it holds a tunnel open and serves the
// streams the server opens on it.
type Client struct {
	Policy Policy
	// Say writes a line of the agent's account.
	Say func(format string, args ...any)
	// maxStreams bounds streams served at once, whatever the server asks.
	maxStreams int
}

// Run keeps a tunnel to server (the agent's base URL) open over hc until
// ctx ends, reconnecting with backoff and jitter when it drops. hc is the
// agent's own certificate-authenticated client, so the tunnel rides on the
// HTTP/2 connection the agent already holds.
func (c *Client) Run(ctx context.Context, hc *http.Client, server string) {
	backoff := time.Second
	failing := false
	for ctx.Err() == nil {
		began := time.Now()
		first := true
		err := c.connect(ctx, hc, server, func() {
			if failing || first {
				c.say("opened the tunnel to the server: %s", c.Policy)
			}
			failing, first = false, false
		})
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = time.Second // it was up for a while: this is a fresh failure
		}
		// Full jitter over [backoff/2, backoff): a server restart must not
		// bring the whole fleet's tunnels back in the same instant.
		wait := backoff/2 + rand.N(backoff/2+1)
		if !failing || backoff >= 30*time.Second {
			c.say("the tunnel to the server is down (%v); reconnecting in %s", err, wait.Round(time.Millisecond))
		}
		failing = true
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (c *Client) say(format string, args ...any) {
	if c.Say != nil {
		c.Say(format, args...)
	}
}

// connect holds one tunnel until it drops; opened is called once the
// server has accepted it.
func (c *Client) connect(ctx context.Context, hc *http.Client, server string, opened func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(server, "/")+Path, pr)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := hc.Do(req)
	if err != nil {
		_ = pw.Close()
		return err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		_ = pw.Close()
		return fmt.Errorf("the server answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	sess, err := yamux.Server(&clientConn{r: resp.Body, w: pw}, muxConfig())
	if err != nil {
		_ = resp.Body.Close()
		_ = pw.Close()
		return err
	}
	defer sess.Close()
	context.AfterFunc(ctx, func() { _ = sess.Close() })
	opened()
	return c.Serve(ctx, sess)
}

// Serve accepts and serves the streams of sess until it ends.
func (c *Client) Serve(ctx context.Context, sess *yamux.Session) error {
	max := c.maxStreams
	if max <= 0 {
		max = 2 * DefaultMaxStreams
	}
	slots := make(chan struct{}, max)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			if errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, io.EOF) {
				err = errors.New("the connection ended")
			}
			return err
		}
		select {
		case slots <- struct{}{}:
		default:
			_ = s.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			c.serveStream(ctx, s)
		}()
	}
}

type clientConn struct {
	r io.ReadCloser
	w *io.PipeWriter
}

func (c *clientConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *clientConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *clientConn) Close() error {
	_ = c.w.Close()
	return c.r.Close()
}

// serveStream reads the server's request, accepts or refuses it, and serves it.
func (c *Client) serveStream(ctx context.Context, s *yamux.Stream) {
	defer s.Close()
	_ = s.SetReadDeadline(time.Now().Add(15 * time.Second))
	var req Request
	if err := readHeader(s, &req); err != nil {
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	refuse := func(format string, args ...any) {
		why := fmt.Sprintf(format, args...)
		c.say("refused %s asked by %s: %s", req.Kind, req.User, why)
		_ = writeHeader(s, Reply{Error: why})
	}
	switch req.Kind {
	case KindExec:
		if c.Policy.DisableExec {
			refuse("%s", c.Policy.execRefusal())
			return
		}
		if err := ValidateCommand(req.Command); err != nil {
			refuse("%v", err)
			return
		}
		if err := writeHeader(s, Reply{}); err != nil {
			return
		}
		// Who and which program, never the arguments (DescribeCommand):
		// this log is served to operators and, inside muster-server, is
		// the server's log.
		c.say("exec by %s of %s", req.User, DescribeCommand(req.Command))
		runExec(ctx, s, req.Command)
	case KindPortForward:
		if !slices.Contains(c.Policy.AllowPorts, req.Port) {
			refuse("port %d is not published by this agent: it forwards only to the loopback ports given with %s (%s)", req.Port, c.Policy.portsFlag(), allowed(c.Policy.AllowPorts))
			return
		}
		forwardLoopback(ctx, s, req.Port, refuse, "nothing answers on 127.0.0.1:%d on this machine (%v): start the service, or forward another port")
	case KindKubeAPI:
		if c.Policy.KubeAPIPort == 0 || req.Port != c.Policy.KubeAPIPort {
			refuse("the server asked for the cluster's API on port %d, but this agent reaches the kube-apiserver only on the port given with --kube-apiserver-port (%s): "+
				"make the Cluster's spec.kubernetesAPI.port and the agent's flag agree", req.Port, kubeAPIPort(c.Policy.KubeAPIPort))
			return
		}
		forwardLoopback(ctx, s, req.Port, refuse, "the kube-apiserver does not answer on 127.0.0.1:%d on this machine (%v): is it running?")
	case KindLog:
		if c.Policy.Log == nil {
			refuse("this agent keeps no log to serve")
			return
		}
		if err := writeHeader(s, Reply{}); err != nil {
			return
		}
		_, _ = s.Write(c.Policy.Log.Bytes())
	default:
		refuse("unknown stream kind %q: this agent serves exec, portforward, kubeapi and log (is it older than the server?)", req.Kind)
	}
}

func kubeAPIPort(p int) string {
	if p == 0 {
		return "0: refused"
	}
	return strconv.Itoa(p)
}

func allowed(ports []int) string {
	if len(ports) == 0 {
		return "none are"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return "allowed: " + strings.Join(s, ", ")
}

// pipe copies both ways until both directions have ended; each end's EOF
// is passed on as a half-close, so request/response protocols work.
func pipe(s *yamux.Stream, conn *net.TCPConn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(conn, s)
		_ = conn.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(s, conn)
	_ = s.Close()
	<-done
}

// runExec runs argv and sends its output and exit code as frames. The
// server closing the stream (the user went away) kills the command.
func runExec(ctx context.Context, s *yamux.Stream, argv []string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// Nothing comes from the server after the request but its close.
		_, _ = io.Copy(io.Discard, s)
		cancel()
	}()
	var mu sync.Mutex
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout = &frameWriter{s: s, typ: FrameStdout, mu: &mu}
	cmd.Stderr = &frameWriter{s: s, typ: FrameStderr, mu: &mu}
	// A command's children may hold its output open after it is killed;
	// do not wait for them for ever.
	cmd.WaitDelay = 5 * time.Second
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
			if code < 0 {
				code = 128 + 9 // killed by a signal, as a shell reports it
			}
		default:
			code = 127 // as a shell does for a command it cannot run
			mu.Lock()
			_ = WriteFrame(s, FrameStderr, []byte(fmt.Sprintf("muster-agent: cannot run %q: %v\n", argv[0], err)))
			mu.Unlock()
		}
	}
	mu.Lock()
	_ = WriteFrame(s, FrameExit, ExitFrame(code))
	mu.Unlock()
}

type frameWriter struct {
	s   io.Writer
	typ byte
	mu  *sync.Mutex
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), MaxFrameBytes)]
		if err := WriteFrame(w.s, w.typ, chunk); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// forwardLoopback joins stream s to 127.0.0.1:port on this machine, or
// refuses it with unreachable (given the port and the dial's error) when
// nothing answers there.
func forwardLoopback(ctx context.Context, s *yamux.Stream, port int, refuse func(string, ...any), unreachable string) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := d.DialContext(dctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	cancel()
	if err != nil {
		refuse(unreachable, port, err)
		return
	}
	defer conn.Close()
	if err := writeHeader(s, Reply{}); err != nil {
		return
	}
	pipe(s, conn.(*net.TCPConn))
}

// Package forwardproxy is how muster-agent reaches a server: directly, or
// through the HTTP forward proxy that HTTPS_PROXY (or https_proxy) names,
// unless NO_PROXY (or no_proxy) exempts the server. It is the one dialer
// behind every connection the agent makes to a server: the join and
// /cacerts, and the load balancer's connections and health checks, which
// carry the watch, heartbeats and the tunnel.
//
// Through a proxy the agent asks for a tunnel with CONNECT and speaks TLS
// inside it, so the proxy sees only the server's address: the agent still
// checks the server against the CA its join token pinned, end to end.
//
// The rules are Go's (golang.org/x/net/http/httpproxy) and curl's: an
// https:// server goes through HTTPS_PROXY only; HTTP_PROXY is for
// plain-http URLs, which the agent never uses; loopback addresses and
// localhost never go through a proxy.
package forwardproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// Dialer opens TCP connections to servers, through the proxy when the
// environment says so.
type Dialer struct {
	// variable names where the HTTPS proxy came from, for messages.
	variable string
	proxy    *url.URL
	noProxy  string
	proxyFor func(*url.URL) (*url.URL, error)
	direct   net.Dialer
	// httpOnly is set when HTTP_PROXY is set but no HTTPS_PROXY.
	httpOnly string
}

// Direct is a Dialer that never uses a proxy.
func Direct() *Dialer {
	return &Dialer{proxyFor: func(*url.URL) (*url.URL, error) { return nil, nil }}
}

// FromEnvironment reads HTTPS_PROXY, HTTP_PROXY and NO_PROXY (either case,
// lowercase first as Go does). A proxy variable that is not a proxy URL is
// an error here, at start, rather than a connection failing forever.
func FromEnvironment() (*Dialer, error) {
	cfg := httpproxy.FromEnvironment()
	d := &Dialer{noProxy: cfg.NoProxy}
	for _, v := range []struct{ names [2]string }{{[2]string{"https_proxy", "HTTPS_PROXY"}}, {[2]string{"http_proxy", "HTTP_PROXY"}}} {
		name, value := lookup(v.names[:]...)
		if value == "" {
			continue
		}
		u, err := Parse(value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if strings.EqualFold(name, "https_proxy") {
			d.variable, d.proxy = name, u
		} else if d.proxy == nil {
			d.httpOnly = name
		}
	}
	d.proxyFor = cfg.ProxyFunc()
	return d, nil
}

func lookup(names ...string) (string, string) {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return n, v
		}
	}
	return names[len(names)-1], ""
}

// Parse checks a proxy URL as the agent uses it: http:// or https://, a
// host, an optional port, optional user:password, nothing else. A URL
// without a scheme is read as http://, as Go and curl do. Errors never
// repeat a password.
func Parse(value string) (*url.URL, error) {
	shown := Redact(value)
	hint := "set it like http://proxy.example.com:3128 or http://USER:PASSWORD@proxy.example.com:3128"
	raw := value
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	_, rest, _ := strings.Cut(raw, "://")
	hostPort, _, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(hostPort, "@"); at >= 0 {
		hostPort = hostPort[at+1:]
	}
	if strings.Count(hostPort, ":") >= 2 && !strings.HasPrefix(hostPort, "[") {
		return nil, fmt.Errorf("%q: an IPv6 proxy address goes in brackets, like http://[2001:db8::1]:3128", shown)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, password and all
		}
		return nil, fmt.Errorf("%q is not a proxy URL (%v): %s", shown, err, hint)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: the agent speaks only to http:// or https:// proxies, not %s://: %s", shown, u.Scheme, hint)
	case u.Hostname() == "":
		return nil, fmt.Errorf("%q names no proxy host: %s", shown, hint)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%q has a path or query, which a proxy URL does not: %s", shown, hint)
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil {
			return nil, fmt.Errorf("%q: port %q is not a port number: %s", shown, p, hint)
		}
	}
	return u, nil
}

// Redact is a proxy URL without its user and password, for logs and
// errors: the proxy's address is what an operator needs to see.
func Redact(value string) string {
	scheme, rest, ok := strings.Cut(value, "://")
	if !ok {
		scheme, rest = "", value
	}
	host, path, slash := strings.Cut(rest, "/")
	if at := strings.LastIndex(host, "@"); at >= 0 {
		host = host[at+1:]
	}
	if slash {
		host += "/" + path
	}
	if scheme == "" {
		return host
	}
	return scheme + "://" + host
}

// Configured reports whether a proxy variable is set, so that the agent
// says what it does with it.
func (d *Dialer) Configured() bool { return d.proxy != nil || d.httpOnly != "" }

// Describe says, for the agent's first lines, how it reaches servers.
func (d *Dialer) Describe() string {
	var b strings.Builder
	if d.proxy == nil {
		b.WriteString("connecting to servers directly (no HTTPS_PROXY)")
	} else {
		fmt.Fprintf(&b, "connecting to servers through the proxy %s (from %s)", Redact(d.proxy.String()), d.variable)
		if d.noProxy != "" {
			fmt.Fprintf(&b, ", except those NO_PROXY names (%s)", d.noProxy)
		}
		b.WriteString("; loopback addresses always directly")
	}
	if d.httpOnly != "" {
		fmt.Fprintf(&b, "; %s is set but applies only to plain-http URLs, and servers speak HTTPS: set HTTPS_PROXY to use a proxy", d.httpOnly)
	}
	return b.String()
}

// ProxyFor is the proxy a connection to address (host:port) goes
// through, nil for a direct connection.
func (d *Dialer) ProxyFor(address string) (*url.URL, error) {
	return d.proxyFor(&url.URL{Scheme: "https", Host: address})
}

// Transport is an http.Transport that reaches servers through this
// dialer, for tlsConfig. Its Proxy is off: the dialer alone decides, so
// a connection is never sent through two proxies.
func (d *Dialer) Transport(tlsConfig *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:               NoProxy,
		DialContext:         d.DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
	}
}

// NoProxy is an http.Transport.Proxy that never proxies. Unlike a nil
// Proxy, k8s.io/apimachinery's SetTransportDefaults keeps it.
func NoProxy(*http.Request) (*url.URL, error) { return nil, nil }

// DialContext connects to address, through the proxy when one applies.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	p, err := d.ProxyFor(address)
	if err != nil {
		return nil, fmt.Errorf("choosing a proxy for %s: %w", address, err)
	}
	if p == nil {
		return d.direct.DialContext(ctx, network, address)
	}
	conn, err := d.connect(ctx, p, address)
	if err != nil {
		return nil, &proxyError{err}
	}
	return conn, nil
}

// proxyError is a failure of the proxy itself (reaching it, CONNECT):
// its message already names the proxy.
type proxyError struct{ err error }

func (e *proxyError) Error() string { return e.err.Error() }
func (e *proxyError) Unwrap() error { return e.err }

// Explain names the proxy in err, a failure talking to address, when the
// connection went through one. A proxy that dies with the connection open
// shows only as a reset or an EOF to whoever reads it, which alone would
// send the operator to look at the server.
func (d *Dialer) Explain(address string, err error) error {
	var pe *proxyError
	if err == nil || errors.As(err, &pe) {
		return err
	}
	p, perr := d.ProxyFor(address)
	if perr != nil || p == nil {
		return err
	}
	return fmt.Errorf("%w (through the proxy %s (%s): check that it runs)", err, Redact(p.String()), d.source())
}

// connect opens a tunnel to address through the proxy p with CONNECT.
func (d *Dialer) connect(ctx context.Context, p *url.URL, address string) (net.Conn, error) {
	name := Redact(p.String())
	proxyAddr := p.Host
	if p.Port() == "" {
		port := "80"
		if p.Scheme == "https" {
			port = "443"
		}
		proxyAddr = net.JoinHostPort(p.Hostname(), port)
	}
	conn, err := d.direct.DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the proxy %s (%s) to connect to %s: %w; check that the proxy runs and that %s names it", name, d.source(), address, err, d.source())
	}
	if p.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: p.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS with the proxy %s (%s): %w", name, d.source(), err)
		}
		conn = tc
	}
	// The CONNECT exchange ends with ctx, like the dial.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: address}, Host: address, Header: http.Header{}}
	if u := p.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	br := bufio.NewReader(conn)
	err = req.Write(conn)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	stopped := stop()
	if err != nil || !stopped {
		conn.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("asking the proxy %s (%s) to connect to %s: %w", name, d.source(), address, err)
	}
	_ = conn.SetDeadline(time.Time{})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		hint := ""
		// 407 is the standard answer; some proxies (tinyproxy, to wrong
		// credentials) answer 401.
		auth := resp.StatusCode == http.StatusProxyAuthRequired || resp.StatusCode == http.StatusUnauthorized
		switch {
		case auth && p.User == nil:
			hint = fmt.Sprintf(": the proxy wants a user and password; give them in %s as http://USER:PASSWORD@%s", d.source(), p.Host)
		case auth:
			hint = fmt.Sprintf(": the proxy does not accept the user and password in %s; check them", d.source())
		case resp.StatusCode == http.StatusForbidden:
			hint = fmt.Sprintf(": the proxy does not allow CONNECT to %s; allow it there, or exempt the server with NO_PROXY", address)
		}
		return nil, fmt.Errorf("the proxy %s (%s) refused to connect to %s: %s%s", name, d.source(), address, resp.Status, hint)
	}
	if br.Buffered() > 0 {
		// The server spoke first; keep what was read.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

func (d *Dialer) source() string {
	if d.variable == "" {
		return "HTTPS_PROXY"
	}
	return d.variable
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

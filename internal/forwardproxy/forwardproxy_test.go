package forwardproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string // "" when accepted
	}{
		{"http://proxy.example:3128", ""},
		{"proxy.example:3128", ""}, // no scheme: http://, as Go and curl read it
		{"http://alice:s3cret@proxy.example:3128", ""},
		{"https://proxy.example", ""},
		{"http://[2001:db8::1]:3128", ""},
		{"http://proxy.example:port", `invalid port ":port"`},
		{"http://alice:s3cret@proxy.example:port", "not a proxy URL"},
		{"socks5://proxy.example:1080", "only to http:// or https:// proxies"},
		{"http://", "names no proxy host"},
		{"http://proxy.example:3128/path", "path or query"},
		{"http://2001:db8::1:3128", "in brackets"},
		{"http://proxy.example:99999", "not a port number"},
	} {
		_, err := Parse(tc.value)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Parse(%q) = %v, want accepted", tc.value, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Parse(%q) = %v, want an error saying %q", tc.value, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("Parse(%q)'s error repeats the password: %v", tc.value, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"http://alice:s3cret@proxy.example:3128": "http://proxy.example:3128",
		"http://alice@proxy.example:3128/":       "http://proxy.example:3128/",
		"proxy.example:3128":                     "proxy.example:3128",
		"a:b@proxy.example:3128":                 "proxy.example:3128",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
		// proxied says whether a connection to 10.0.0.1:9443 uses the proxy.
		proxied bool
	}{
		{"none", nil, "", false},
		{"HTTPS_PROXY", map[string]string{"HTTPS_PROXY": "http://proxy.example:3128"}, "", true},
		{"lowercase", map[string]string{"https_proxy": "http://proxy.example:3128"}, "", true},
		{"NO_PROXY exempts the server", map[string]string{"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "10.0.0.1"}, "", false},
		{"NO_PROXY by CIDR", map[string]string{"HTTPS_PROXY": "http://proxy.example:3128", "no_proxy": "10.0.0.0/8"}, "", false},
		{"HTTP_PROXY alone is for http URLs", map[string]string{"HTTP_PROXY": "http://proxy.example:3128"}, "", false},
		{"malformed HTTPS_PROXY", map[string]string{"HTTPS_PROXY": "http://u:pw@proxy.example:port"}, "HTTPS_PROXY", false},
		{"malformed HTTP_PROXY", map[string]string{"HTTP_PROXY": "ftp://proxy.example"}, "HTTP_PROXY", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "REQUEST_METHOD"} {
				t.Setenv(n, tc.env[n])
			}
			d, err := FromEnvironment()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "pw@") {
					t.Errorf("the error repeats the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := d.ProxyFor("10.0.0.1:9443")
			if err != nil || (p != nil) != tc.proxied {
				t.Errorf("ProxyFor = %v, %v; want proxied=%v", p, err, tc.proxied)
			}
			// Loopback never goes through a proxy (Go's rule).
			if p, _ := d.ProxyFor("127.0.0.1:9443"); p != nil {
				t.Errorf("loopback goes through %v", p)
			}
		})
	}
}

// TestConnectRefused: a proxy that answers CONNECT with 407 or is down
// gives an error that names the proxy (never the password) and says what
// to do.
func TestConnectRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gotAuth := make(chan string, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err == nil {
				gotAuth <- req.Method + " " + req.Host + " " + req.Header.Get("Proxy-Authorization")
				_, _ = io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\n\r\n")
			}
			c.Close()
		}
	}()
	d := dialerFor(t, "http://alice:s3cret@"+l.Addr().String(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = d.DialContext(ctx, "tcp", "10.0.0.1:9443")
	if err == nil {
		t.Fatal("a 407 gave a connection")
	}
	for _, want := range []string{"http://" + l.Addr().String(), "407 Proxy Authentication Required", "HTTPS_PROXY", "check them"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "alice") {
		t.Errorf("error repeats the credentials: %v", err)
	}
	// "alice:s3cret" in base64: the credentials reach the proxy, and only it.
	if got := <-gotAuth; got != "CONNECT 10.0.0.1:9443 Basic YWxpY2U6czNjcmV0" {
		t.Errorf("the proxy got %q", got)
	}

	l.Close()
	_, err = d.DialContext(ctx, "tcp", "10.0.0.1:9443")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the proxy http://"+l.Addr().String()) {
		t.Errorf("a proxy that is down: %v", err)
	}
}

// TestExplain: a failure on a connection made through the proxy names the
// proxy (never its password) once; a direct one is left as it is.
func TestExplain(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := l.Addr().String()
	l.Close() // a proxy that is down: dials through it are refused
	d := dialerFor(t, "http://alice:s3cret@"+proxyAddr, "10.0.0.2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, refused := d.DialContext(ctx, "tcp", "10.0.0.1:9443")
	if refused == nil {
		t.Fatal("a dial through a proxy that is down succeeded")
	}
	named := "the proxy http://" + proxyAddr + " (HTTPS_PROXY)"
	for _, tc := range []struct {
		name    string
		address string
		err     error
		want    string // the error's whole message
	}{
		{"nothing failed", "10.0.0.1:9443", nil, ""},
		{"EOF through the proxy", "10.0.0.1:9443", io.EOF, "EOF (through " + named + ": check that it runs)"},
		{"EOF on a direct connection", "10.0.0.2:9443", io.EOF, "EOF"},
		{"the proxy's own error is not named twice", "10.0.0.1:9443", refused, refused.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := d.Explain(tc.address, tc.err)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("Explain(nil) = %v", got)
				}
				return
			}
			if got.Error() != tc.want {
				t.Errorf("Explain = %q, want %q", got, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("Explain(%v) no longer wraps it", tc.err)
			}
			if strings.Count(got.Error(), "http://"+proxyAddr) > 1 || strings.Contains(got.Error(), "s3cret") {
				t.Errorf("Explain = %q: the proxy named more than once, or its password", got)
			}
		})
	}
	if !strings.Contains(refused.Error(), named) {
		t.Errorf("a refused dial through the proxy does not name it: %v", refused)
	}
}

// dialerFor is the Dialer of an environment where HTTPS_PROXY is proxyURL
// and NO_PROXY is noProxy, whatever the test's own environment says.
func dialerFor(t *testing.T, proxyURL, noProxy string) *Dialer {
	t.Helper()
	t.Setenv("HTTPS_PROXY", proxyURL)
	t.Setenv("https_proxy", "")
	t.Setenv("NO_PROXY", noProxy)
	t.Setenv("no_proxy", "")
	d, err := FromEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

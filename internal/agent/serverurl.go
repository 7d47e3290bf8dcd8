package agent

import (
	"fmt"
	"net/url"
	"strings"
)

// checkServerURL refuses a --server the agent could only retry forever:
// without a scheme (Go would read "10.0.0.1:9443" as a path, and
// "host:9443" as scheme "host"), or plain http (the server speaks only
// TLS, so every try would fail the same way).
func checkServerURL(server string) error {
	if !strings.Contains(server, "://") {
		return fmt.Errorf("--server %s has no scheme: muster-server speaks HTTPS, use --server https://%s", server, server)
	}
	if scheme, rest, _ := strings.Cut(server, "://"); true {
		host, _, _ := strings.Cut(rest, "/")
		if strings.Count(host, ":") >= 2 && !strings.HasPrefix(host, "[") {
			// Go's URL parser reads the address's colons as a bad port.
			return fmt.Errorf("--server %s: an IPv6 address goes in brackets, like --server %s", server, bracketed(scheme, host))
		}
	}
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("--server %q is not a URL (%v): use --server https://HOST:9443", server, err)
	}
	switch {
	case u.Scheme == "http":
		return fmt.Errorf("--server %s uses http: muster-server serves only HTTPS, use --server https://%s", server, strings.TrimPrefix(server, "http://"))
	case u.Scheme != "https":
		return fmt.Errorf("--server %s: scheme %q is not supported, use --server https://HOST:9443", server, u.Scheme)
	case u.Host == "":
		return fmt.Errorf("--server %s names no host: use --server https://HOST:9443", server)
	}
	return nil
}

// portHint says what a --server without a port dials, once it has failed a
// few times: https's default 443, where muster-server (9443 by default)
// usually is not. "" when the URL has a port.
func portHint(server string) string {
	u, err := url.Parse(server)
	if err != nil || u.Port() != "" {
		return ""
	}
	return fmt.Sprintf("--server %s has no port, so the agent dials port 443; muster-server listens on 9443 unless --https-port says otherwise: try --server https://%s:9443",
		server, u.Hostname())
}

// bracketed is scheme://[host]:port for an IPv6 host written without
// brackets, the last colon-separated part taken as the port when it looks
// like one (2001:db8::1:9443), else port 9443.
func bracketed(scheme, host string) string {
	if i := strings.LastIndex(host, ":"); i > 0 && len(host)-i-1 >= 2 && len(host)-i-1 <= 5 &&
		strings.Trim(host[i+1:], "0123456789") == "" && strings.Count(host[:i], ":") >= 2 {
		return scheme + "://[" + host[:i] + "]:" + host[i+1:]
	}
	return scheme + "://[" + host + "]:9443"
}

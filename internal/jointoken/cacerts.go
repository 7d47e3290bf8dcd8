package jointoken

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// ErrBadServerURL means the server address cannot be a URL; retrying cannot help.
var ErrBadServerURL = errors.New("not a server URL")

// FetchCA reads a server's /cacerts without trusting the server yet: what
// it returns may be trusted only once PinsCA accepts it. dial opens the
// connection (the agent's proxy-aware dialer); nil dials directly.
func FetchCA(ctx context.Context, server string, dial func(ctx context.Context, network, address string) (net.Conn, error)) ([]byte, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The dialer alone decides on a proxy: never two.
		Proxy:           nil,
		DialContext:     dial,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // verified by hash (PinsCA)
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+"/cacerts", nil)
	if err != nil {
		return nil, fmt.Errorf("--server %q: %w: %v", server, ErrBadServerURL, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching %s: %w", server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/cacerts answered %s", server, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// PinsCA reports whether ca is the CA the token was made for.
func (t Token) PinsCA(ca []byte) bool {
	sum := sha256.Sum256(ca)
	return t.CAHash != "" && hex.EncodeToString(sum[:]) == t.CAHash
}

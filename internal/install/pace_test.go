package install

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/ratelimit"
)

// smallBuffers keeps a connection's socket buffers small, so that a
// client that stops reading blocks the server's writes after kilobytes,
// not after the megabytes loopback buffers otherwise take.
func smallBuffers(network, address string, c syscall.RawConn) error {
	var err error
	_ = c.Control(func(fd uintptr) {
		if err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096); err == nil {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
		}
	})
	return err
}

type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// assetServer serves h over real HTTP (write deadlines need a real
// connection) with small socket buffers. A request with the header
// X-Test-User is made by that user (testCaller), as the API's
// authentication would say; any other is anonymous.
func assetServer(t *testing.T, h *Handlers) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ScriptPath {
			h.script(w, r)
			return
		}
		h.asset(w, r)
	}))
	srv.Listener = smallBufferListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// clientFrom is a client whose connections leave from local (127.0.0.x)
// with small socket buffers, each request on a connection of its own.
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Control: smallBuffers, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// agentFile writes size random bytes as the agent binary and returns
// handlers serving it, and its contents.
func agentFile(t *testing.T, size int) (*Handlers, []byte, string) {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	path := filepath.Join(t.TempDir(), "muster-agent")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return New(Config{AgentBinary: path, ServerBinary: path, Caller: testCaller}), b, AssetsPrefix + "muster-agent-" + runtime.GOOS + "-" + runtime.GOARCH
}

// TestDownloadPaced: a client that reads a download at 2 KiB/s is cut
// off once it falls behind the minimum pace, instead of holding the
// download as long as it likes; one that keeps up gets every byte; and
// a client cut off resumes where it was with a Range request.
func TestDownloadPaced(t *testing.T) {
	h, content, path := agentFile(t, 4<<20)
	h.pace = pace{minRate: 256 << 10, grace: 500 * time.Millisecond, stall: 500 * time.Millisecond}
	srv := assetServer(t, h)
	c := clientFrom("127.0.0.1")

	t.Run("slow reader cut off", func(t *testing.T) {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s", resp.Status)
		}
		// 32 bytes every 16 ms: 2 KiB/s, as curl --limit-rate 2k.
		start := time.Now()
		tick := time.NewTicker(16 * time.Millisecond)
		defer tick.Stop()
		var got int
		buf := make([]byte, 32)
		for {
			<-tick.C
			n, err := resp.Body.Read(buf)
			got += n
			if err != nil {
				took := time.Since(start)
				t.Logf("a 2 KiB/s reader was cut off after %d of %d bytes, %v after it started (%v)", got, len(content), took.Round(time.Millisecond), err)
				if errors.Is(err, io.EOF) && got == len(content) {
					t.Fatalf("the slow reader got the whole file")
				}
				if took > 30*time.Second {
					t.Fatalf("the slow reader held the download for %v", took)
				}
				return
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("a 2 KiB/s reader still reads after a minute (%d bytes): it was never cut off", got)
			}
		}
	})

	t.Run("reader that keeps up gets it all", func(t *testing.T) {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(b, content) {
			t.Fatalf("full download: %d of %d bytes, %v", len(b), len(content), err)
		}
	})

	t.Run("resume with Range", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Range", "bytes=1000000-")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusPartialContent || err != nil || !bytes.Equal(b, content[1000000:]) {
			t.Fatalf("range: %s, %d bytes, %v", resp.Status, len(b), err)
		}
	})
}

// TestDownloadSlots: one address holds at most AnonymousPerAddress
// downloads and all addresses together at most the anonymous total; past
// either the answer is 429 with Retry-After and what to do. Meanwhile
// install.sh and the .sha256 answer at once to anyone, another address
// still downloads, and authenticated clients (agents upgrading) have
// slots of their own that anonymous clients cannot take.
func TestDownloadSlots(t *testing.T) {
	h, _, path := agentFile(t, 4<<20)
	h.anonymous = ratelimit.NewSlots(AnonymousPerAddress, AnonymousPerAddress+2)
	srv := assetServer(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// hold starts a download from local and keeps it open, unread.
	hold := func(local string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := clientFrom(local).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	wantRefused := func(resp *http.Response, words string) {
		t.Helper()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), words) || !strings.Contains(string(b), "retry") {
			t.Fatalf("want 429 with Retry-After saying %q and when to retry, got %s (Retry-After %q): %s", words, resp.Status, resp.Header.Get("Retry-After"), b)
		}
	}
	for i := range AnonymousPerAddress {
		if resp := hold("127.0.0.1"); resp.StatusCode != http.StatusOK {
			t.Fatalf("download %d from 127.0.0.1: %s", i+1, resp.Status)
		}
	}
	wantRefused(hold("127.0.0.1"), fmt.Sprintf("at most %d per address", AnonymousPerAddress))

	// The small answers take no slot: at once, from the same address.
	for _, p := range []string{ScriptPath, path + ".sha256"} {
		start := time.Now()
		resp, err := clientFrom("127.0.0.1").Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != http.StatusOK || took > time.Second {
			t.Fatalf("%s while 127.0.0.1 holds its downloads: %s after %v", p, resp.Status, took)
		}
	}

	// Other addresses download until the total is held.
	for _, local := range []string{"127.0.0.2", "127.0.0.3"} {
		if resp := hold(local); resp.StatusCode != http.StatusOK {
			t.Fatalf("download from %s: %s", local, resp.Status)
		}
	}
	wantRefused(hold("127.0.0.4"), "clients without credentials")

	// An agent still downloads: authenticated clients have their own.
	if resp := hold("127.0.0.4", "X-Test-User", "machine:web-1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("an agent's download while anonymous clients hold theirs: %s", resp.Status)
	}
	if resp := hold("127.0.0.4", "X-Test-User", "machine:web-1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("an agent's second download: %s", resp.Status)
	}
	wantRefused(hold("127.0.0.4", "X-Test-User", "machine:web-1"), "machine:web-1 already has")
}

// testCaller stands in for the API chain's apiserver.CallerName.
func testCaller(r *http.Request) string { return r.Header.Get("X-Test-User") }

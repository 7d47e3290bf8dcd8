package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// fromAddress is an HTTPS client of s whose connections leave from the
// loopback address local (127.0.0.x: Linux routes all of 127/8 to lo), so
// that one test process can be many client addresses. Each client has its
// own transport, so its requests never share another's connection.
func fromAddress(s *server, local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
}

// slowDownload is one client that asks for a binary and, if it is
// served, reads it a few bytes at a time until ctx ends: what
// `curl --limit-rate` does to hold a download open.
type slowDownload struct {
	addr       string
	code       int
	retryAfter string
	body       string // the start of a refusal's body
	ended      error  // why a served download ended before ctx (nil: it lasted)
}

// startSlowDownloads starts n slow clients from each of addrs on path and
// returns, once every one has its answer's status, what each got; their
// downloads go on until ctx ends, and done is closed once all stopped.
func startSlowDownloads(t *testing.T, ctx context.Context, s *server, path string, addrs []string, n int) (results []*slowDownload, done <-chan struct{}) {
	t.Helper()
	answered := make(chan *slowDownload, n*len(addrs))
	var wg sync.WaitGroup
	for _, addr := range addrs {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := &slowDownload{addr: addr}
				c := fromAddress(s, addr)
				defer c.CloseIdleConnections()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url()+path, nil)
				resp, err := c.Do(req)
				if err != nil {
					d.body = err.Error()
					answered <- d
					return
				}
				defer resp.Body.Close()
				d.code, d.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
				if resp.StatusCode != http.StatusOK {
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
					d.body = string(b)
					answered <- d
					return
				}
				answered <- d
				// 16 bytes every 20 ms: under 1 KiB/s, slower than
				// curl --limit-rate 2k, until the test is done with it.
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				buf := make([]byte, 16)
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					if _, err := resp.Body.Read(buf); err != nil {
						if ctx.Err() == nil {
							d.ended = err
						}
						return
					}
				}
			}()
		}
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	timeout := time.After(60 * time.Second)
	for len(results) < n*len(addrs) {
		select {
		case d := <-answered:
			results = append(results, d)
		case <-timeout:
			t.Fatalf("only %d of %d slow downloads had an answer within 60s", len(results), n*len(addrs))
		}
	}
	return results, all
}

// timed runs one probe and returns how long it took.
func timed(t *testing.T, what string, probe func() error) time.Duration {
	t.Helper()
	start := time.Now()
	err := probe()
	took := time.Since(start)
	if err != nil {
		t.Errorf("%s while slow downloads last: %v (after %v)", what, err, took.Round(time.Millisecond))
	} else if took > time.Second {
		t.Errorf("%s while slow downloads last took %v; it must answer within 1s", what, took.Round(time.Millisecond))
	}
	return took
}

// getOK reads path in full through c and wants 200.
func getOK(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// TestSlowDownloadsBlockNothing (issue 27, finding 2): slow clients without
// credentials — 100 from one address, then 100 from ten addresses — each
// holding a download of the agent binary open by reading a few bytes at a
// time, leave every other public path answering within a second from
// another address: /install.sh, /cacerts, the binary's .sha256, a join
// (a registration created with a join token), and a download of the
// binary itself. One address holds only a few downloads; the rest are
// told 429 with Retry-After and what to do.
func TestSlowDownloadsBlockNothing(t *testing.T) {
	// Not parallel: measures latencies, so it runs alone.
	s := startServer(t, "", "--agent-binary", agentBin)
	token := newToken(t, s)
	asset := fmt.Sprintf("/assets/muster-agent-%s-%s", runtime.GOOS, runtime.GOARCH)
	const probeAddr = "127.0.0.200"
	probe := fromAddress(s, probeAddr)
	caPEM, err := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(probeAddr)}, Timeout: 5 * time.Second}
	joinClient := clientset.NewForConfigOrDie(&rest.Config{Host: s.url(), BearerToken: bearerOf(token), Dial: dialer.DialContext,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})

	ten := make([]string, 10)
	for i := range ten {
		ten[i] = fmt.Sprintf("127.0.0.%d", 3+i)
	}
	for _, tc := range []struct {
		name  string
		addrs []string
		each  int
	}{
		{"100 from one address", []string{"127.0.0.2"}, 100},
		{"100 from ten addresses", ten, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			results, done := startSlowDownloads(t, ctx, s, asset, tc.addrs, tc.each)
			served := map[string]int{}
			codes := map[int]int{}
			for _, d := range results {
				codes[d.code]++
				switch d.code {
				case http.StatusOK:
					served[d.addr]++
				case http.StatusTooManyRequests:
					if d.retryAfter == "" || !strings.Contains(d.body, "retry") {
						t.Errorf("a 429 must carry Retry-After and say what to do: Retry-After %q, body %q", d.retryAfter, d.body)
					}
				default:
					t.Errorf("slow download from %s: %d %s", d.addr, d.code, d.body)
				}
			}
			t.Logf("answers to %d slow downloads: %v; downloads held per address: %v", len(results), codes, served)
			for addr, n := range served {
				if n > 4 {
					t.Errorf("%s holds %d downloads at once; one address may hold a few (4), not more", addr, n)
				}
			}

			latencies := map[string]time.Duration{
				"/install.sh": timed(t, "GET /install.sh", func() error { return getOK(probe, s.url()+"/install.sh") }),
				"/cacerts":    timed(t, "GET /cacerts", func() error { return getOK(probe, s.url()+"/cacerts") }),
				asset + ".sha256": timed(t, "GET "+asset+".sha256", func() error {
					return getOK(probe, s.url()+asset+".sha256")
				}),
				"join": timed(t, "a join (registration create with a join token)", func() error {
					return createRegistration(ctx, joinClient, fmt.Sprintf("slow-%d", len(tc.addrs)), func(*api.ClusterRegistration) {})
				}),
			}
			// A download from another address starts at once and ends:
			// the slow clients hold their own slots, not everyone's.
			var got int64
			latencies["first byte of "+asset] = timed(t, "GET "+asset, func() error {
				resp, err := probe.Get(s.url() + asset)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
					return fmt.Errorf("%s: %s", resp.Status, b)
				}
				var one [1]byte
				_, err = io.ReadFull(resp.Body, one[:])
				go func() { n, _ := io.Copy(io.Discard, resp.Body); atomic.StoreInt64(&got, n+1) }()
				return err
			})
			for what, took := range latencies {
				t.Logf("%s answered in %v from %s while %d slow downloads were held", what, took.Round(time.Microsecond), probeAddr, codes[http.StatusOK])
			}
			// The probes proved something only if the slow downloads were
			// still open while they ran.
			for _, d := range results {
				if d.ended != nil {
					t.Errorf("a slow download from %s ended before the probes were done (%v): the test measured nothing", d.addr, d.ended)
					break
				}
			}
			cancel()
			<-done
		})
	}
}

// TestAnonymousConsoleTokensRefusedByChain (issue 27, "read in the code"):
// an anonymous request for /console/tokens is refused by the API's
// authentication and authorization, before the console's handler: the
// answer is the API's Status object (kind Status, 401), not the handler's
// {"message": ...} 403. The sign-in page, its assets and the sign-in
// endpoint stay public.
func TestAnonymousConsoleTokensRefusedByChain(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	for _, tc := range []struct {
		method, path string
		want         int
		chain        bool // refused by the API's chain (a Status object), not by the console's handler
	}{
		{http.MethodGet, "/console/tokens", http.StatusUnauthorized, true},
		{http.MethodPost, "/console/tokens", http.StatusUnauthorized, true},
		{http.MethodGet, "/console/", http.StatusOK, false},
		{http.MethodGet, "/console/app.js", http.StatusOK, false},
		// The sign-in endpoint is reached: its handler refuses a request
		// without the console's CSRF header.
		{http.MethodPost, "/console/session", http.StatusForbidden, false},
	} {
		req, _ := http.NewRequest(tc.method, s.url()+tc.path, strings.NewReader("{}"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var status struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(b, &status)
		t.Logf("anonymous %s %s: %d %s", tc.method, tc.path, resp.StatusCode, strings.TrimSpace(string(b[:min(len(b), 200)])))
		if resp.StatusCode != tc.want {
			t.Errorf("anonymous %s %s: %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.want, b)
		}
		if tc.chain && status.Kind != "Status" {
			t.Errorf("anonymous %s %s was answered by the console's handler (%s), not refused by the API's authorizer before it", tc.method, tc.path, b)
		}
	}
}

// TestDataDirTightened (issue 27, "read in the code"): a data dir that
// exists with a mode wider than 0700 (made by hand, or by a packager) is
// tightened to 0700 when the server starts, and the server's log says so:
// it holds the CA's key and the admin kubeconfig. A wide dir that holds
// other files is not muster-server's to change: the server refuses it
// and says what to do, and the dir keeps its mode.
func TestDataDirTightened(t *testing.T) {
	t.Parallel()
	t.Run("empty dir made 0755", func(t *testing.T) {
		s := newServer(t, "127.0.0.1", "")
		if err := os.Chmod(s.dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		s.start()
		fi, err := os.Stat(s.dataDir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("data dir mode after start: %04o, want 0700", fi.Mode().Perm())
		}
		if !strings.Contains(s.log.String(), "Tightened the data dir to mode 0700") {
			t.Errorf("the server's log does not say it tightened the data dir to 0700:\n%s", s.log.String())
		}
	})
	t.Run("shared dir refused", func(t *testing.T) {
		s := newServer(t, "127.0.0.1", "")
		if err := os.WriteFile(filepath.Join(s.dataDir, "someone-elses.conf"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(s.dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		s.launch()
		select {
		case <-s.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("muster-server started on a shared 0755 dir:\n%s", s.log.String())
		}
		if log := s.log.String(); !strings.Contains(log, "not muster-server's") || !strings.Contains(log, "chmod 0700") {
			t.Errorf("the refusal does not say what to do:\n%s", log)
		}
		if fi, err := os.Stat(s.dataDir); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("a dir muster-server refused was changed: %v %v", fi.Mode().Perm(), err)
		}
	})
}

// TestInstallScriptWaitsOutBusyDownloads (issue 27, finding 2): install.sh
// run while its own address holds as many downloads as the server allows
// (here 16 slow clients that give up after 3s) is told 429 with
// Retry-After for the binary, waits as told, tries again and installs,
// where it used to fail at the first 429.
func TestInstallScriptWaitsOutBusyDownloads(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", "--agent-binary", agentBin)
	token := newToken(t, s)
	asset := fmt.Sprintf("/assets/muster-agent-%s-%s", runtime.GOOS, runtime.GOARCH)
	// 127.0.0.1: the address install.sh's curl connects from.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	results, done := startSlowDownloads(t, ctx, s, asset, []string{"127.0.0.1"}, 16)
	held := 0
	for _, d := range results {
		if d.code == http.StatusOK {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("no slow download was served: %+v", results[0])
	}
	r := newInstallRoot(t)
	start := time.Now()
	out, err := pipeInstall(t, s, s.url(), r, "agent", "--token", token, "--server", s.url(), "--node-name", "busy-1")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("install.sh while %d slow downloads from its address were held: %v\n%s", held, err, out)
	}
	t.Logf("install.sh installed in %v while %d slow downloads from its address were held until 3s", took.Round(time.Millisecond), held)
	// Installing takes well under a second when nothing is held: taking
	// longer than the slow clients lasted shows it was refused and retried.
	if took < 3*time.Second {
		t.Errorf("install.sh took %v: it was never refused, so the test proved nothing", took)
	}
	<-done
}

// Package receiver gives tests a real HTTPS webhook receiver in its own
// process (cmd/muster-test-receiver, built by the test): it checks each
// request's HMAC-SHA256 signature when given a key and records what it
// accepted. It can be stopped and started again on the same address, to
// play a receiver that is down for a while.
package receiver

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/testcert"

	"github.com/muster-io/muster/internal/testenv/proc"
)

// Record is one request the receiver accepted.
type Record struct {
	Time        time.Time       `json:"time"`
	Path        string          `json:"path"`
	ContentType string          `json:"contentType"`
	Signature   string          `json:"signature,omitempty"`
	Body        json.RawMessage `json:"body"`
}

// Receiver is a receiver process, running or stopped.
type Receiver struct {
	// URL is https://127.0.0.1:PORT, the same across restarts.
	URL string
	// CAFile signed the receiver's certificate (for 127.0.0.1).
	CAFile string
	// Out is the file of accepted requests, one JSON Record a line.
	Out string

	t       testing.TB
	addr    string
	dir     string
	hmacKey string
	proc    *proc.Proc
	starts  int
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// build compiles the receiver once per test binary.
func build() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "muster-test-receiver")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "muster-test-receiver")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/muster-io/muster/internal/testenv/receiver/cmd/muster-test-receiver").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building the test receiver: %v\n%s", err, out)
		}
	})
	return binary, buildErr
}

// Start runs a receiver on a free loopback port. With a non-empty hmacKey
// it refuses (401) every request not signed with it.
func Start(t testing.TB, hmacKey string) *Receiver {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := &Receiver{URL: "https://" + addr, CAFile: filepath.Join(dir, "ca.crt"), Out: filepath.Join(dir, "received.jsonl"), t: t, addr: addr, dir: dir, hmacKey: hmacKey}
	if err := writeCert(dir); err != nil {
		t.Fatal(err)
	}
	if hmacKey != "" {
		if err := os.WriteFile(filepath.Join(dir, "hmac.key"), []byte(hmacKey), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.Start()
	return r
}

// Start starts the stopped receiver again on the same address and waits
// until it serves.
func (r *Receiver) Start() {
	r.t.Helper()
	bin, err := build()
	if err != nil {
		r.t.Fatal(err)
	}
	args := []string{"--listen", r.addr, "--cert", filepath.Join(r.dir, "tls.crt"), "--key", filepath.Join(r.dir, "tls.key"), "--out", r.Out}
	if r.hmacKey != "" {
		args = append(args, "--hmac-key-file", filepath.Join(r.dir, "hmac.key"))
	}
	r.starts++
	r.proc = proc.Start(r.t, exec.Command(bin, args...), filepath.Join(r.dir, fmt.Sprintf("receiver-%d.log", r.starts)))
	pem, _ := os.ReadFile(r.CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(r.URL + "/ready")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-r.proc.Done():
			r.t.Fatalf("the receiver exited:\n%s", r.proc.Log())
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the receiver did not serve within 30s: %v\n%s", err, r.proc.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the receiver: its address refuses connections until Start.
func (r *Receiver) Stop() { r.proc.Stop() }

// Log is what the receiver process printed (refusals) since it last started.
func (r *Receiver) Log() string { return r.proc.Log() }

// Records are the requests accepted so far, oldest first.
func (r *Receiver) Records() []Record {
	b, err := os.ReadFile(r.Out)
	if err != nil {
		return nil
	}
	var out []Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var rec Record
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// Raw is every byte the receiver accepted, to search for what must not be there.
func (r *Receiver) Raw() string {
	b, _ := os.ReadFile(r.Out)
	return string(b)
}

// writeCert writes a CA and a serving certificate for 127.0.0.1 signed by it.
func writeCert(dir string) error {
	return testcert.Write(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), "127.0.0.1")
}

package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestRetryClassification(t *testing.T) {
	gr := schema.GroupResource{Group: api.GroupName, Resource: "clusterregistrations"}
	tooMany := apierrors.NewTooManyRequests("slow down", 7)
	unavailable := apierrors.NewServiceUnavailable("caches are loading")
	unavailable.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 3}
	tests := []struct {
		name               string
		err                error
		refused, transient bool
		wait               time.Duration // at least this
	}{
		{"401 wrong token", apierrors.NewUnauthorized("check the token"), true, false, 0},
		{"403 machine gone", apierrors.NewForbidden(gr, "x", errors.New("machine x no longer exists")), true, false, 0},
		{"403 wrapped", fmt.Errorf("the server refused: %w", apierrors.NewForbidden(gr, "x", errors.New("no"))), true, false, 0},
		{"429 with Retry-After", tooMany, false, true, 7 * time.Second},
		{"503 with Retry-After", unavailable, false, true, 3 * time.Second},
		{"500", apierrors.NewInternalError(errors.New("boom")), false, true, 0},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false, true, 0},
		{"EOF", io.ErrUnexpectedEOF, false, true, 0},
		{"422 invalid request", apierrors.NewInvalid(schema.GroupKind{Kind: "ClusterRegistration"}, "x", nil), false, false, 0},
		{"canceled", context.Canceled, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refused(tt.err); got != tt.refused {
				t.Errorf("refused = %v, want %v", got, tt.refused)
			}
			if got := transient(tt.err); got != tt.transient {
				t.Errorf("transient = %v, want %v", got, tt.transient)
			}
			if tt.wait > 0 {
				if got := retryWait(tt.err, time.Second); got < tt.wait || got > tt.wait*2 {
					t.Errorf("wait %s, want Retry-After's %s", got, tt.wait)
				}
			}
		})
	}
}

// fakeServer answers the agent's requests from a script: each path's
// answers in order, the last one repeated.
type fakeServer struct {
	*httptest.Server
	mu      sync.Mutex
	answers map[string][]answer
	creates int
}

type answer struct {
	code       int
	retryAfter string
	body       interface{}
}

func status(code int, reason metav1.StatusReason, msg string) answer {
	return answer{code: code, body: &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}}
}

func newFakeServer(t *testing.T, dir string, answers map[string][]answer) *fakeServer {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServing("127.0.0.1", nil, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{answers: answers}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}
	f.StartTLS()
	t.Cleanup(f.Close)
	clientPEM, clientKey, err := ca.IssueClient("muster:machine:m1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{caFile: ca.CertPEM, certFile: clientPEM, keyFile: clientKey} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	key := r.Method + " " + r.URL.Path
	if r.Method == http.MethodPost {
		f.creates++
	}
	list := f.answers[key]
	var a answer
	switch {
	case len(list) == 0:
		a = status(404, metav1.StatusReasonNotFound, "not in the script: "+key)
	case len(list) == 1:
		a = list[0]
	default:
		a, f.answers[key] = list[0], list[1:]
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.WriteHeader(a.code)
	_ = json.NewEncoder(w).Encode(a.body)
}

const regsPath = "/apis/muster.io/v1alpha1/clusterregistrations"

func registration(phase api.RegistrationPhase) *api.ClusterRegistration {
	return &api.ClusterRegistration{
		TypeMeta:   metav1.TypeMeta{Kind: "ClusterRegistration", APIVersion: "muster.io/v1alpha1"},
		ObjectMeta: metav1.ObjectMeta{Name: "r"},
		Status:     api.ClusterRegistrationStatus{Phase: phase, Machine: "m1", Certificate: []byte("cert")},
	}
}

// TestRequestRetriesWhatMayPass: a renewal (or a join) rides through a
// server that is restarting or busy, honouring Retry-After, without
// registering twice; a 401/403 ends it at once with the server's words.
func TestRequestRetriesWhatMayPass(t *testing.T) {
	unavailable := status(503, metav1.StatusReasonServiceUnavailable, "caches are loading")
	unavailable.retryAfter = "1"
	tests := []struct {
		name        string
		create      []answer
		get         []answer
		wantErr     string
		wantFatal   bool
		wantCreates int
	}{
		{name: "503 while waiting for the grant: keep waiting, do not register again",
			create:      []answer{{code: 201, body: registration(api.RegistrationPhasePending)}},
			get:         []answer{status(503, metav1.StatusReasonServiceUnavailable, "restarting"), status(503, metav1.StatusReasonServiceUnavailable, "restarting"), {code: 200, body: registration(api.RegistrationPhaseGranted)}},
			wantCreates: 1},
		{name: "401 is final and says the server's reason",
			create:  []answer{status(401, metav1.StatusReasonUnauthorized, "wrong token: check the token")},
			wantErr: "check the token", wantFatal: true, wantCreates: 1},
		{name: "403 is final and says the server's reason",
			create:  []answer{status(403, metav1.StatusReasonForbidden, "machine m1 no longer exists")},
			wantErr: "no longer exists", wantFatal: true, wantCreates: 1},
		{name: "503 with Retry-After is tried again by the client",
			create:      []answer{unavailable, {code: 201, body: registration(api.RegistrationPhaseGranted)}},
			wantCreates: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			f := newFakeServer(t, dir, map[string][]answer{
				"POST " + regsPath:            tt.create,
				"GET " + regsPath + "/" + "*": tt.get,
			})
			// Gets carry the generated name; route them all to the script.
			f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, regsPath+"/") {
					r.URL.Path = regsPath + "/*"
				}
				f.serve(w, r)
			})
			a := &agent{cfg: Config{Server: f.URL, Out: io.Discard, NodeName: "m1"}, dir: dataDir(dir), gone: make(chan error, 1)}
			c, err := a.client()
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			id, err := a.dir.credentials("m1", false)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			granted, _, err := a.request(ctx, c, id)
			var fe *fatalError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("request: %v", err)
			case tt.wantErr == "" && granted.Status.Phase != api.RegistrationPhaseGranted:
				t.Errorf("phase %s", granted.Status.Phase)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			case tt.wantFatal && !errors.As(err, &fe):
				t.Errorf("err = %v is not final", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.creates != tt.wantCreates {
				t.Errorf("%d registrations sent, want %d", f.creates, tt.wantCreates)
			}
		})
	}
}

// TestCheckCertificateWaitsForTheServer: at start, a server that answers
// 503 (restarting, caches loading) is waited for; only its real answer
// decides whether the stored certificate still works.
func TestCheckCertificateWaitsForTheServer(t *testing.T) {
	dir := t.TempDir()
	machine := &api.Machine{TypeMeta: metav1.TypeMeta{Kind: "Machine", APIVersion: "muster.io/v1alpha1"}, ObjectMeta: metav1.ObjectMeta{Name: "m1"}}
	f := newFakeServer(t, dir, map[string][]answer{
		"GET /apis/muster.io/v1alpha1/machines/m1": {
			status(503, metav1.StatusReasonServiceUnavailable, "loading"),
			status(503, metav1.StatusReasonServiceUnavailable, "loading"),
			{code: 200, body: machine},
		},
	})
	a := &agent{cfg: Config{Server: f.URL, Out: io.Discard}, dir: dataDir(dir)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, _, err := a.checkCertificate(ctx)
	if err != nil || name != "m1" {
		t.Errorf("checkCertificate = %q, %v; want m1 once the server answers", name, err)
	}
}

// An agent that lost the server comes back at a jittered time, or when the
// server said to: a fleet cut off in the same instant must not retry (each
// retry a TLS handshake) in lockstep.
func TestLostBeatIsJitteredOrTheServers(t *testing.T) {
	refusedConn := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name     string
		err      error
		min, max time.Duration
	}{
		{"connection refused: the interval with jitter", refusedConn, HeartbeatInterval / 2, 3 * HeartbeatInterval / 2},
		{"503 without Retry-After: the interval with jitter", apierrors.NewServiceUnavailable("starting"), HeartbeatInterval / 2, 3 * HeartbeatInterval / 2},
		{"429 with Retry-After 20: the server's word, plus up to a tenth", apierrors.NewTooManyRequests("busy", 20), 20 * time.Second, 22 * time.Second},
		{"Retry-After of hours: bounded", apierrors.NewTooManyRequests("busy", 36000), maxRetryAfter, maxRetryAfter + maxRetryAfter/10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 200 {
				d := LostBeat(tc.err)
				if d < tc.min || d > tc.max {
					t.Fatalf("LostBeat = %s, want within [%s, %s]", d, tc.min, tc.max)
				}
				seen[d] = true
			}
			// Jittered: 200 draws are not one value.
			if len(seen) < 2 {
				t.Errorf("200 draws gave %d distinct waits, want jitter", len(seen))
			}
		})
	}
}

// TestRenewalAfterCARotationIsRetried: the CA bundle changed, the agent
// stored it and asked for a certificate, and that request failed (a CI
// run: the load balancer switched servers mid-request). It must be asked
// again after its wait, not only once the bundle changes again, which it
// never will.
func TestRenewalAfterCARotationIsRetried(t *testing.T) {
	dir := t.TempDir()
	other, err := pki.NewCA("the-new-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := other.IssueClient("muster:machine:m1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	granted := registration(api.RegistrationPhaseGranted)
	granted.Status.Certificate = certPEM
	f := newFakeServer(t, dir, map[string][]answer{
		"POST " + regsPath: {status(422, metav1.StatusReasonInvalid, "lost on the way"), {code: 201, body: granted}},
	})
	held, err := os.ReadFile(filepath.Join(dir, caFile))
	if err != nil {
		t.Fatal(err)
	}
	rotated := append(append([]byte{}, held...), other.CertPEM...)
	f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cacerts" {
			_, _ = w.Write(rotated)
			return
		}
		f.serve(w, r)
	})
	var out strings.Builder
	var mu sync.Mutex
	a := &agent{cfg: Config{Server: f.URL, Out: lockedWriter{&mu, &out}, NodeName: "m1", CACheckInterval: 100 * time.Millisecond}, dir: dataDir(dir), gone: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a.renewWhenDue(ctx)
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() != nil || !strings.Contains(out.String(), "renewed the certificate") {
		t.Errorf("the renewal was not asked again after it failed (a rotation's renewal waits for the next change of the bundle):\n%s", out.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.creates != 2 {
		t.Errorf("%d renewals sent; want 2 (the one lost, the one granted)", f.creates)
	}
}

// lockedWriter is an io.Writer safe for the agent's goroutines.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

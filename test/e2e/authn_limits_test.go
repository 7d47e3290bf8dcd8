package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/testenv/pgtest"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// TestRestartNeverRefusesValidToken (issue 13, finding 12): a server
// killed with -9 and restarted never answers a valid join token with 401,
// polled every few milliseconds from the moment its port opens; until it
// can judge the token it holds the request or answers 503 with Retry-After.
func TestRestartNeverRefusesValidToken(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := bearerOf(newToken(t, s))
	const path = "/apis/muster.io/v1alpha1/clusterregistrations/probe-after-restart"
	for round := 1; round <= 3; round++ {
		s.kill9()
		s.launch()
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
		answers := map[int]int{}
		deadline := time.Now().Add(90 * time.Second)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the restarted server did not answer the token normally within 90s: %v\n%s", round, answers, s.log.String())
			}
			req, _ := http.NewRequest(http.MethodGet, s.url()+path, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			if err != nil {
				select {
				case <-s.exited:
					t.Fatalf("muster-server exited:\n%s", s.log.String())
				case <-time.After(3 * time.Millisecond):
				}
				continue
			}
			var body strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
			resp.Body.Close()
			answers[resp.StatusCode]++
			switch resp.StatusCode {
			case http.StatusUnauthorized, http.StatusForbidden:
				t.Fatalf("round %d: a valid join token was refused (%d) after a restart: %s (answers so far %v)", round, resp.StatusCode, body.String(), answers)
			case http.StatusServiceUnavailable:
				if resp.Header.Get("Retry-After") == "" {
					t.Errorf("round %d: 503 without Retry-After: %s", round, body.String())
				}
			}
			if resp.StatusCode == http.StatusNotFound {
				break
			}
			time.Sleep(3 * time.Millisecond)
		}
		t.Logf("round %d: answers until the token was judged: %v", round, answers)
		client.CloseIdleConnections()
	}
}

// TestVoidedCertificateEndsWatches (finding 14): watches opened with a
// machine's certificate end when the Machine is deleted, and never stream
// the next Machine of the same name (another UID) or its plan's contents.
// On PostgreSQL the watches are held on a second server of the deployment
// and the Machine is deleted through the first.
func TestVoidedCertificateEndsWatches(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		s := startServer(t, "")
		voidedCertificateEndsWatches(t, s, s)
	})
	t.Run("postgres-ha", func(t *testing.T) {
		servers := startHA(t, pgtest.DSN(t), 2)
		voidedCertificateEndsWatches(t, servers[0], servers[1])
	})
}

func voidedCertificateEndsWatches(t *testing.T, s, watched *server) {
	token := newToken(t, s)
	oldDir := t.TempDir()
	a := startAgent(t, s, oldDir, "--token", token, "--node-name", "node1")
	a.waitOutput("running as machine node1", 60*time.Second)
	oldUID := s.mustKubectl("get", "machine", "node1", "-o", "jsonpath={.metadata.uid}")
	// The agent stops; its certificate stays, as a thief would keep it.
	a.kill()

	caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	stolen := clientset.NewForConfigOrDie(&rest.Config{Host: watched.url(), TLSClientConfig: rest.TLSClientConfig{
		CAData: caPEM, CertFile: filepath.Join(oldDir, "client.crt"), KeyFile: filepath.Join(oldDir, "client.key")}})
	ctx := context.Background()
	long := int64(3600)
	opts := metav1.ListOptions{FieldSelector: "metadata.name=node1", TimeoutSeconds: &long}
	mw, err := stolen.MusterV1alpha1().Machines().Watch(ctx, opts)
	if err != nil {
		t.Fatalf("watching the machine with its own certificate: %v", err)
	}
	pw, err := stolen.MusterV1alpha1().MachinePlans().Watch(ctx, opts)
	if err != nil {
		t.Fatalf("watching the plan with its own certificate: %v", err)
	}
	type seen struct {
		what   string
		events []string
		ended  chan struct{}
	}
	collect := func(what string, w watch.Interface) *seen {
		s := &seen{what: what, ended: make(chan struct{})}
		go func() {
			defer close(s.ended)
			for ev := range w.ResultChan() {
				b, _ := json.Marshal(ev.Object)
				s.events = append(s.events, string(ev.Type)+" "+string(b))
			}
		}()
		return s
	}
	watches := []*seen{collect("machine watch", mw), collect("plan watch", pw)}
	t.Cleanup(func() { mw.Stop(); pw.Stop() })

	deleted := time.Now()
	s.mustKubectl("delete", "machine", "node1")
	for _, w := range watches {
		select {
		case <-w.ended:
			t.Logf("the %s ended %s after kubectl delete began", w.what, time.Since(deleted).Round(time.Millisecond))
		case <-time.After(15 * time.Second):
			t.Errorf("the %s of the deleted machine's certificate is still open 15s after the delete", w.what)
		}
	}

	// A new agent joins as node1; its plan carries a secret.
	b := startAgent(t, s, t.TempDir(), "--token", token, "--node-name", "node1")
	b.waitOutput("running as machine node1", 60*time.Second)
	newUID := s.mustKubectl("get", "machine", "node1", "-o", "jsonpath={.metadata.uid}")
	if newUID == oldUID {
		t.Fatalf("the new node1 has the old UID %s", oldUID)
	}
	const secret = "s3cret-of-the-new-node1"
	work := t.TempDir()
	applyPlan(t, s, "node1", fmt.Sprintf("  files:\n  - path: %s\n    content: %q\n    mode: 384\n", filepath.Join(work, "secret.conf"), secret))
	waitFor(t, 30*time.Second, "the new node1 applied its plan", func() bool {
		_, err := os.Stat(filepath.Join(work, "secret.conf"))
		return err == nil
	})
	for _, w := range watches {
		select {
		case <-w.ended:
		default:
			t.Fatalf("the %s is still open after the machine was replaced", w.what)
		}
		for _, ev := range w.events {
			if strings.Contains(ev, secret) || strings.Contains(ev, newUID) {
				t.Errorf("the %s of the deleted machine streamed the new machine's object: %.300s", w.what, ev)
			}
		}
	}
	// And the old certificate cannot open a new watch.
	if _, err := stolen.MusterV1alpha1().MachinePlans().Watch(ctx, opts); err == nil {
		t.Error("the voided certificate opened a new watch")
	}
}

// TestAgentWatchLimit (finding 6): one machine certificate holds at most
// a few watches; past the limit the server answers 429 with Retry-After
// and says why, and a watch may open again once one has ended.
func TestAgentWatchLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token", newToken(t, s), "--node-name", "watcher")
	a.waitOutput("running as machine watcher", 60*time.Second)
	client := certHTTPClient(t, s, dir)
	client.Timeout = 0
	const path = "/apis/muster.io/v1alpha1/machineplans?watch=1&fieldSelector=metadata.name%3Dwatcher"
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	refused := 0
	for i := 0; i < 20 && refused == 0; i++ {
		resp, err := client.Get(s.url() + path)
		if err != nil {
			t.Fatal(err)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			open = append(open, resp)
		case http.StatusTooManyRequests:
			refused++
			var body strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
			resp.Body.Close()
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(body.String(), "watches") {
				t.Errorf("429 without Retry-After or a reason: %s", body.String())
			}
		default:
			t.Fatalf("watch %d: %s", i, resp.Status)
		}
	}
	// The agent itself holds two or three.
	if refused == 0 || len(open) > 8 || len(open) < 5 {
		t.Fatalf("one certificate opened %d watches (refused: %d); want at most 8 with the agent's own", len(open), refused)
	}
	open[0].Body.Close()
	open = open[1:]
	waitFor(t, 10*time.Second, "a watch opens again once one ended", func() bool {
		resp, err := client.Get(s.url() + path)
		if err != nil {
			return false
		}
		if resp.StatusCode == http.StatusOK {
			open = append(open, resp)
			return true
		}
		resp.Body.Close()
		return false
	})
}

// TestFailedTokenAuthenticationsLimited (finding 6): failed join-token
// authentications from one address are refused with 429 and Retry-After
// past a limit and are logged by sample, not a line each; an unknown
// token id costs no datastore read, as a known one does not.
func TestFailedTokenAuthenticationsLimited(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	good := newToken(t, s)
	id := bearerOf(good)[:strings.Index(bearerOf(good), ".")]
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	const path = "/apis/muster.io/v1alpha1/clusterregistrations/probe"
	with := func(token string) map[string]string { return map[string]string{"Authorization": "Bearer " + token} }

	tokenReads := func() int {
		n := 0
		for _, line := range strings.Split(s.mustKubectl("get", "--raw", "/metrics"), "\n") {
			if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="clusterregistrationtokens"`) && strings.Contains(line, `verb="GET"`) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				n += int(v)
			}
		}
		return n
	}
	// Known id, wrong secret, and unknown ids: the same work, no datastore read.
	if code, _, _ := do(t, client, s, http.MethodGet, "/healthz", nil, nil); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	before := tokenReads()
	var known, unknown time.Duration
	for i := 0; i < 8; i++ {
		// Alternate which goes first, so that neither pays for a cold connection.
		value, total := id+"."+strings.Repeat("b", 32), &known
		if i%2 == 1 {
			value, total = fmt.Sprintf("zz%04d.%s", i, strings.Repeat("a", 32)), &unknown
		}
		start := time.Now()
		code, _, body := do(t, client, s, http.MethodGet, path, nil, with(value))
		*total += time.Since(start)
		if code != http.StatusUnauthorized {
			t.Fatalf("%s: %d %s", value[:6], code, body)
		}
		if !strings.Contains(body, "muster-server token create") {
			t.Errorf("the 401 does not say what to do: %s", body)
		}
	}
	if after := tokenReads(); after != before {
		t.Errorf("failed token authentications read join tokens from the datastore %d times", after-before)
	}
	t.Logf("mean answer: known id %s, unknown id %s", known/4, unknown/4)

	// 8 failures so far; the limit is 10 a minute.
	for i := 0; i < 2; i++ {
		if code, _, _ := do(t, client, s, http.MethodGet, path, nil, with("zzzzzz."+strings.Repeat("c", 32))); code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", 9+i, code)
		}
	}
	code, retry, body := do(t, client, s, http.MethodGet, path, nil, with("zzzzzz."+strings.Repeat("d", 32)))
	if code != http.StatusTooManyRequests || retry == "" || !strings.Contains(body, "too many failed join-token authentications") {
		t.Fatalf("the 11th failure in a minute: %d Retry-After %q %s", code, retry, body)
	}
	// The address is refused whatever token it sends until the window ends.
	if code, _, _ := do(t, client, s, http.MethodGet, path, nil, with(bearerOf(good))); code != http.StatusTooManyRequests {
		t.Errorf("a blocked address was served: %d", code)
	}
	// An administrator's certificate is not a join token and is served.
	s.mustKubectl("get", "machines")

	lines := 0
	for _, line := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(line, "invalid bearer token") || strings.Contains(line, "Refused join tokens") {
			lines++
		}
	}
	if lines > 2 {
		t.Errorf("%d log lines for 11 failed authentications; want them sampled:\n%s", lines, s.log.String())
	}
}

// TestTokenUsableAtOnceOnAnotherServer: join tokens are judged from each
// server's cache (so an unknown id costs no datastore read); a token
// created through one server of an HA deployment and used at once on
// another is still accepted, not refused while that server's cache
// catches up.
func TestTokenUsableAtOnceOnAnotherServer(t *testing.T) {
	t.Parallel()
	servers := startHA(t, pgtest.DSN(t), 2)
	admin := clientVia(t, servers[0], servers[0])
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: servers[1].caPool()}}}
	for i := 0; i < 5; i++ {
		tok, err := jointoken.Create(context.Background(), admin.MusterV1alpha1(), jointoken.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code, _, body := do(t, client, servers[1], http.MethodGet, "/apis/muster.io/v1alpha1/clusterregistrations/probe", nil,
			map[string]string{"Authorization": "Bearer " + tok.Bearer()})
		if code != http.StatusNotFound {
			t.Fatalf("token %d, created through server 1 and used at once on server 2: %d %s", i, code, body)
		}
		t.Logf("token %d accepted by the other server after %s", i, time.Since(start).Round(time.Millisecond))
	}
}

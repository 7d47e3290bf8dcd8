package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/testenv/receiver"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// notifyOutage is how long the receiver of TestNotificationsOutage is
// down. The scenario is 2 minutes; CI uses 20 s, which exercises
// the same queue and backoff (the retries reach --notification-max-backoff
// either way). MUSTER_E2E_NOTIFY_OUTAGE=2m runs the length.
// receiverOnThisHost lets the server send to the tests' receivers, which
// listen on 127.0.0.1: a server refuses loopback receivers by default.
const receiverOnThisHost = "--notification-allowed-networks=127.0.0.0/8"

func notifyOutage(t *testing.T) time.Duration {
	if v := os.Getenv("MUSTER_E2E_NOTIFY_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("MUSTER_E2E_NOTIFY_OUTAGE=%q: %v", v, err)
		}
		return d
	}
	return 20 * time.Second
}

// cloudEventOf is what the test reads of a received CloudEvent.
type cloudEventOf struct {
	SpecVersion string            `json:"specversion"`
	ID          string            `json:"id"`
	Type        string            `json:"type"`
	Subject     string            `json:"subject"`
	Time        time.Time         `json:"time"`
	Sequence    string            `json:"sequence"`
	Data        map[string]string `json:"data"`
}

func receivedEvents(t *testing.T, r *receiver.Receiver) []cloudEventOf {
	t.Helper()
	var out []cloudEventOf
	for _, rec := range r.Records() {
		var e cloudEventOf
		if err := json.Unmarshal(rec.Body, &e); err != nil {
			t.Fatalf("the receiver got a body that is no CloudEvent: %v\n%s", err, rec.Body)
		}
		if !strings.HasPrefix(rec.ContentType, "application/cloudevents+json") || e.SpecVersion != "1.0" || !strings.HasPrefix(rec.Signature, "sha256=") {
			t.Fatalf("not a signed structured CloudEvent 1.0: content type %q, specversion %q, signature %q", rec.ContentType, e.SpecVersion, rec.Signature)
		}
		out = append(out, e)
	}
	return out
}

func applySubscription(t *testing.T, kubeconfig, name, url, caFile, key string, maxQueued int, events ...api.NotificationEvent) {
	t.Helper()
	ca := ""
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		ca = string(b)
	}
	obj := map[string]any{
		"apiVersion": "muster.io/v1alpha1", "kind": "NotificationSubscription", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"url": url, "caBundle": ca, "events": events, "signingKey": key, "maxQueued": maxQueued},
	}
	b, _ := json.Marshal(obj)
	f := filepath.Join(t.TempDir(), "sub.json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectlAs(kubeconfig, "apply", "-f", f); err != nil {
		t.Fatalf("applying the subscription: %v\n%s", err, out)
	}
}

// pendingRegistration files a registration with a manual-approval token:
// it waits for approval, the transition RegistrationPending tells of.
func pendingRegistration(t *testing.T, s *server, token, node string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := newJoiner(node).register(ctx, tokenClient(s, token), metav1.CreateOptions{}, nil)
	if err != nil {
		t.Fatalf("registration of %s: %v", node, err)
	}
	if r.Status.Phase != api.RegistrationPhasePending {
		t.Fatalf("registration of %s is %s, want Pending (a manual-approval token)", node, r.Status.Phase)
	}
	return r.Name
}

// TestNotificationsOutage (issue 31, "Notifications"): a subscription's
// receiver — a real HTTPS process checking every event's HMAC — is down
// for a while (notifyOutage), during which registrations wait for approval
// and a machine goes Unavailable twice; the server's requests stay quick
// meanwhile, and once the receiver is back it gets every event of the
// outage, signed, as CloudEvents, each once, in order per object.
func TestNotificationsOutage(t *testing.T) {
	t.Parallel()
	key := "k-" + randomHex(24)
	hook := receiver.Start(t, key)
	s := startServer(t, "", "--agent-silence-threshold", "4s", "--notification-max-backoff", "4s", receiverOnThisHost)
	operator := userKubeconfig(t, s, "otto", "muster:operators")
	applySubscription(t, operator, "ops", hook.URL+"/events", hook.CAFile, key, 0, api.NotifyRegistrationPending, api.NotifyMachineUnavailable)
	manual := newToken(t, s, "--manual-approval")

	// The pipeline works before the outage: one event arrives.
	first := pendingRegistration(t, s, manual, "before-1")
	waitFor(t, 60*time.Second, "the first event at the receiver", func() bool { return len(hook.Records()) >= 1 })

	// A machine that will go silent, twice.
	agentDir := t.TempDir()
	a := startAgent(t, s, agentDir, "--token", newToken(t, s), "--node-name", "quiet-1")
	waitPhase(t, s, "quiet-1", "Running", 60*time.Second)

	hook.Stop()
	outage := notifyOutage(t)
	down := time.Now()
	want := map[string]int{"clusterregistrations/" + first: 1}
	var slowest time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		name := pendingRegistration(t, s, manual, fmt.Sprintf("during-%d", i))
		slowest = max(slowest, time.Since(start))
		want["clusterregistrations/"+name] = 1
	}
	a.kill()
	waitPhase(t, s, "quiet-1", "Unavailable", 60*time.Second)
	a = startAgent(t, s, agentDir)
	waitPhase(t, s, "quiet-1", "Running", 60*time.Second)
	a.kill()
	waitPhase(t, s, "quiet-1", "Unavailable", 60*time.Second)
	want["machines/quiet-1"] = 2
	// Writes while the receiver is down are as quick as ever: delivery is
	// not on their path (a slow receiver would make them wait 10 s each).
	if slowest > 2*time.Second {
		t.Errorf("a registration took %s while the receiver was down", slowest)
	}
	waitFor(t, outage+time.Minute, "the outage to last its length, with every event queued", func() bool {
		_, m := adminRequest(t, s, "GET", "/metrics")
		return time.Since(down) >= outage && metricSum(m, `muster_notification_queue_length{subscription="ops"}`) == 7 &&
			metricSum(m, "muster_notification_delivery_failures_total") >= 2
	})
	_, m := adminRequest(t, s, "GET", "/metrics")
	t.Logf("receiver down %s; %v failed deliveries retried meanwhile", time.Since(down).Round(time.Second), metricSum(m, "muster_notification_delivery_failures_total"))

	hook.Start()
	total := 0
	for _, n := range want {
		total += n
	}
	waitFor(t, 60*time.Second, "every event of the outage at the receiver", func() bool { return len(hook.Records()) >= total })
	got := receivedEvents(t, hook)
	bySubject := map[string][]cloudEventOf{}
	ids := map[string]bool{}
	var lastSeq int64
	for _, e := range got {
		if ids[e.ID] {
			t.Errorf("event %s received twice", e.ID)
		}
		ids[e.ID] = true
		seq, err := strconv.ParseInt(e.Sequence, 10, 64)
		if err != nil || seq <= lastSeq {
			t.Errorf("event %s has sequence %q after %d: out of order", e.ID, e.Sequence, lastSeq)
		}
		lastSeq = seq
		bySubject[e.Subject] = append(bySubject[e.Subject], e)
	}
	for subject, n := range want {
		if len(bySubject[subject]) != n {
			t.Errorf("%s: %d events, want %d", subject, len(bySubject[subject]), n)
		}
	}
	if len(got) != total {
		t.Errorf("the receiver got %d events, want %d: %+v", len(got), total, got)
	}
	un := bySubject["machines/quiet-1"]
	if len(un) == 2 && (un[0].Type != "io.muster.machineunavailable" || !un[0].Time.Before(un[1].Time)) {
		t.Errorf("the machine's events are not its two Unavailable transitions in order: %+v", un)
	}
	if strings.Contains(s.log.String(), key) {
		t.Error("the signing key is in the server's log")
	}
	// A viewer reads the subscription, not its key.
	viewer := userKubeconfig(t, s, "vera", "muster:viewers")
	out, err := kubectlAs(viewer, "get", "notificationsubscription", "ops", "-o", "jsonpath={.spec.signingKey}")
	if err != nil || out != api.Redacted {
		t.Errorf("a viewer read the signing key as %q (%v), want %s", out, err, api.Redacted)
	}
}

// TestNotificationsQueueBound: a receiver that never answers costs the
// server at most the subscription's queue (spec.maxQueued): past it the
// oldest events are dropped, counted, and an Event says so.
func TestNotificationsQueueBound(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: every delivery is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + l.Addr().String() + "/events"
	l.Close()
	s := startServer(t, "", "--notification-max-backoff", "2s", receiverOnThisHost)
	applySubscription(t, s.kubeconfig(), "nowhere", dead, "", "k-"+randomHex(24), 5, api.NotifyRegistrationPending)
	manual := newToken(t, s, "--manual-approval")
	const n = 20
	for i := 0; i < n; i++ {
		pendingRegistration(t, s, manual, fmt.Sprintf("flood-%d", i))
	}
	waitFor(t, 60*time.Second, "the queue at its bound, the rest dropped", func() bool {
		_, m := adminRequest(t, s, "GET", "/metrics")
		return metricSum(m, `muster_notification_queue_length{subscription="nowhere"}`) == 5 &&
			metricSum(m, `muster_notification_queue_capacity{subscription="nowhere"}`) == 5 &&
			metricSum(m, `muster_notifications_dropped_total{subscription="nowhere"}`) == n-5
	})
	waitForEvent(t, s, "the NotificationsDropped event", func(r string) bool {
		return strings.Contains(r, "NotificationsDropped") && strings.Contains(r, "nowhere")
	})
	waitFor(t, 30*time.Second, "the subscription's status to count the drops", func() bool {
		out, _ := s.kubectl("get", "notificationsubscription", "nowhere", "-o", "jsonpath={.status.dropped} {.status.queued} {.status.lastError}")
		return strings.HasPrefix(out, fmt.Sprintf("%d 5 ", n-5)) && strings.Contains(out, "connection refused")
	})
}

// BenchmarkNotificationLatency: from a registration's create (a transition
// to RegistrationPending) to a real HTTPS receiver, checking the HMAC,
// holding the CloudEvent: 200 registrations one after another, SQLite.
func BenchmarkNotificationLatency(b *testing.B) {
	const n = 200
	// lat is from the create's start; seen from the moment the leader saw
	// the transition (the event's time) — the queue and the delivery alone.
	var lat, seen []time.Duration
	for i := 0; i < b.N; i++ {
		key := "k-" + randomHex(24)
		hook := receiver.Start(b, key)
		s := startServer(b, "", receiverOnThisHost)
		ca, err := os.ReadFile(hook.CAFile)
		if err != nil {
			b.Fatal(err)
		}
		obj, _ := json.Marshal(map[string]any{
			"apiVersion": "muster.io/v1alpha1", "kind": "NotificationSubscription", "metadata": map[string]any{"name": "bench"},
			"spec": map[string]any{"url": hook.URL + "/events", "caBundle": string(ca), "events": []string{string(api.NotifyRegistrationPending)}, "signingKey": key},
		})
		f := filepath.Join(b.TempDir(), "sub.json")
		if err := os.WriteFile(f, obj, 0o600); err != nil {
			b.Fatal(err)
		}
		if out, err := kubectlAs(s.kubeconfig(), "apply", "-f", f); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		manual := strings.TrimSpace(mustRun(b, serverBin, "token", "create", "--manual-approval", "--data-dir", s.dataDir))
		c := tokenClient(s, manual)
		created := map[string]time.Time{}
		for k := 0; k < n; k++ {
			start := time.Now()
			r, err := newJoiner(fmt.Sprintf("lat-%d", k)).register(context.Background(), c, metav1.CreateOptions{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			created["clusterregistrations/"+r.Name] = start
		}
		waitFor(b, 2*time.Minute, "every event at the receiver", func() bool { return len(hook.Records()) >= n })
		for _, rec := range hook.Records() {
			var e cloudEventOf
			if err := json.Unmarshal(rec.Body, &e); err != nil {
				b.Fatal(err)
			}
			if start, ok := created[e.Subject]; ok {
				lat = append(lat, rec.Time.Sub(start))
				seen = append(seen, rec.Time.Sub(e.Time))
			}
		}
		s.stop()
		hook.Stop()
	}
	slices.Sort(lat)
	slices.Sort(seen)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(seen[len(seen)/2].Microseconds())/1000, "seen-p50-ms")
	b.ReportMetric(float64(seen[(len(seen)*99)/100].Microseconds())/1000, "seen-p99-ms")
}

// TestNotificationsTransitions: the rollout and machine transitions reach
// a real receiver as their CloudEvents — a plan set whose new revision
// fails pauses and reverts (autoRevert), and a machine whose plan fails
// for good is Failed. (A pool short of replicas: TestNotificationsPoolShort.)
func TestNotificationsTransitions(t *testing.T) {
	t.Parallel()
	key := "k-" + randomHex(24)
	hook := receiver.Start(t, key)
	s := startServer(t, "", receiverOnThisHost)
	applySubscription(t, s.kubeconfig(), "all", hook.URL+"/events", hook.CAFile, key, 0, api.NotificationEvents...)
	token := newToken(t, s)
	rolloutAgents(t, s, token, map[string][]string{"nt-1": {"role=notify"}, "nt-2": {"role=notify"}})
	strategy := "  strategy: {maxUnavailable: 1, autoRevert: true}\n"
	applySet(t, s, setDoc("rv", "role: notify", "v1", strategy))
	waitSetCondition(t, s, "rv", "Complete", "True")
	applySet(t, s, strings.Replace(setDoc("rv", "role: notify", "bad", strategy), "printf", "exit 3; printf", 1))

	fail := startAgent(t, s, t.TempDir(), "--token", token, "--node-name", "nt-fail")
	fail.waitOutput("running as machine nt-fail", 60*time.Second)
	applyPlan(t, s, "nt-fail", "  maxFailures: 1\n  instructions:\n  - name: fail\n    command: /bin/false\n")
	waitPhase(t, s, "nt-fail", "Failed", 60*time.Second)

	want := map[string]string{
		"io.muster.rolloutpaused":   "machineplansets/rv",
		"io.muster.rolloutreverted": "machineplansets/rv",
		"io.muster.machinefailed":   "machines/nt-fail",
	}
	waitFor(t, 90*time.Second, "the rollout's and the machine's events at the receiver", func() bool {
		got := map[string]bool{}
		for _, e := range receivedEvents(t, hook) {
			if want[e.Type] == e.Subject {
				got[e.Type] = true
			}
		}
		return len(got) == len(want)
	})
	for _, e := range receivedEvents(t, hook) {
		if e.Type == "io.muster.rolloutreverted" && (e.Data["failedRevision"] == "" || e.Data["revertedTo"] == "") {
			t.Errorf("the revert event does not say which revision failed and which it went back to: %+v", e.Data)
		}
	}
}

// TestNotificationsPoolShort: a pool whose one machine's agent dies is
// short of replicas, and the receiver is told so.
func TestNotificationsPoolShort(t *testing.T) {
	t.Parallel()
	key := "k-" + randomHex(24)
	hook := receiver.Start(t, key)
	s := startServer(t, "", processDriver, "--agent-silence-threshold", "4s", receiverOnThisHost)
	killPoolAgentsAtEnd(t, s)
	applySubscription(t, s.kubeconfig(), "pools", hook.URL+"/events", hook.CAFile, key, 0, api.NotifyPoolShort)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	applyPool(t, s, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata:
  name: short
spec:
  cluster: edge-east
  replicas: 1
  template:
    driver: process
`)
	waitFor(t, 120*time.Second, "the pool's machine Running, the pool full", func() bool {
		out, _ := s.kubectl("get", "machinepool", "short", "-o", "jsonpath={.status.readyReplicas}")
		return out == "1"
	})
	for _, pid := range poolAgents(s) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	waitFor(t, 90*time.Second, "the PoolShort event at the receiver", func() bool {
		for _, e := range receivedEvents(t, hook) {
			if e.Type == "io.muster.poolshort" && e.Subject == "machinepools/short" && e.Data["replicas"] == "1" && e.Data["readyReplicas"] == "0" {
				return true
			}
		}
		return false
	})
}

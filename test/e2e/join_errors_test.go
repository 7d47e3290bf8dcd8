package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// TestJoinBadInputs is the whole matrix of refused joins and out-of-bounds
// requests: each gets a clear message and changes nothing it should not.
func TestJoinBadInputs(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	good := newToken(t, s)
	caHash := good[3:strings.Index(good, "::")]
	goodID := good[strings.Index(good, "::")+2 : strings.LastIndex(good, ".")]

	expired := newToken(t, s, "--ttl", "1s")
	revoked := newToken(t, s)
	s.muster(t, "token", "revoke", revoked[strings.Index(revoked, "::")+2:strings.LastIndex(revoked, ".")])
	time.Sleep(1500 * time.Millisecond) // let the 1s token expire

	// A first machine holds node name "taken".
	holder := startAgent(t, s, t.TempDir(), "--token", good, "--node-name", "taken")
	holder.waitOutput("running as machine taken", 60*time.Second)

	agentCases := []struct {
		name  string
		token string
		args  []string
		want  []string
	}{
		{"malformed token", "not-a-token", nil, []string{"malformed join token"}},
		{"unknown token id", "K10" + caHash + "::zzzzzz." + strings.Repeat("a", 32), nil, []string{"the server does not know this join token, id zzzzzz", "muster-server token create"}},
		{"wrong secret", "K10" + caHash + "::" + goodID + "." + strings.Repeat("b", 32), nil, []string{"the server does not know this join token", "muster-server token create"}},
		{"expired token", expired, nil, []string{"expired", "muster-server token create"}},
		{"revoked token", revoked, nil, []string{"revoked", "muster-server token create"}},
		{"wrong CA hash", "K10" + strings.Repeat("0", 64) + "::" + goodID + "." + strings.Repeat("c", 32), nil, []string{"does not match", "refusing to send any credential"}},
		{"token without CA hash", goodID + ".abc", nil, []string{"malformed"}},
		{"same node name, other password", good, []string{"--node-name", "taken"},
			[]string{"is forbidden", "node password rejected", "restore its node-password file", "kubectl delete machine taken", "--with-node-id"}},
	}
	for _, tc := range agentCases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.mustKubectl("get", "clusterregistrations,machines,nodepasswords", "-o", "name")
			args := append([]string{"--token", tc.token, "--node-name", "bad-" + strings.ReplaceAll(tc.name, " ", "-")}, tc.args...)
			a := startAgent(t, s, t.TempDir(), args...)
			out, code := a.waitExit(30 * time.Second)
			if code == 0 {
				t.Fatalf("agent exited 0:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("agent output lacks %q:\n%s", w, out)
				}
			}
			if after := s.mustKubectl("get", "clusterregistrations,machines,nodepasswords", "-o", "name"); after != before {
				t.Errorf("a refused join changed state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}

	// Requests made directly with credentials, as an attacker would.
	caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	host := fmt.Sprintf("https://127.0.0.1:%d", s.port)
	bootstrap := clientset.NewForConfigOrDie(&rest.Config{Host: host, BearerToken: good[strings.Index(good, "::")+2:], TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	other := newToken(t, s)
	otherClient := clientset.NewForConfigOrDie(&rest.Config{Host: host, BearerToken: other[strings.Index(other, "::")+2:], TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	anonymous := clientset.NewForConfigOrDie(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	holderDir := holder.dataDir
	holderCert := clientset.NewForConfigOrDie(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{
		CAData: caPEM, CertFile: filepath.Join(holderDir, "client.crt"), KeyFile: filepath.Join(holderDir, "client.key")}})
	ctx := context.Background()
	s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))
	s.mustKubectl("apply", "-f", testdata("manifests", "machine.yaml"))
	s.mustKubectl("apply", "-f", testdata("manifests", "machineplan.yaml"))
	holderReg := s.mustKubectl("get", "clusterregistrations", "-o", "jsonpath={.items[0].metadata.name}")

	requestCases := []struct {
		name string
		call func() error
		want func(error) bool
	}{
		{"bootstrap token lists machines", func() error {
			_, err := bootstrap.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
			return err
		}, apierrors.IsForbidden},
		{"bootstrap token lists registrations", func() error {
			_, err := bootstrap.MusterV1alpha1().ClusterRegistrations().List(ctx, metav1.ListOptions{})
			return err
		}, apierrors.IsForbidden},
		{"bootstrap token reads a registration made with another token", func() error {
			_, err := otherClient.MusterV1alpha1().ClusterRegistrations().Get(ctx, holderReg, metav1.GetOptions{})
			return err
		}, apierrors.IsForbidden},
		{"machine reads another machine", func() error {
			_, err := holderCert.MusterV1alpha1().Machines().Get(ctx, "node-a", metav1.GetOptions{})
			return err
		}, apierrors.IsForbidden},
		{"machine reads another machine's plan", func() error {
			_, err := holderCert.MusterV1alpha1().MachinePlans().Get(ctx, "node-a", metav1.GetOptions{})
			return err
		}, apierrors.IsForbidden},
		{"machine lists all machines", func() error {
			_, err := holderCert.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
			return err
		}, apierrors.IsForbidden},
		{"machine edits its own spec", func() error {
			m, err := holderCert.MusterV1alpha1().Machines().Get(ctx, "taken", metav1.GetOptions{})
			if err != nil {
				return err
			}
			m.Spec.Roles = []string{"etcd"}
			_, err = holderCert.MusterV1alpha1().Machines().Update(ctx, m, metav1.UpdateOptions{})
			return err
		}, apierrors.IsForbidden},
		{"machine reads itself", func() error {
			_, err := holderCert.MusterV1alpha1().Machines().Get(ctx, "taken", metav1.GetOptions{})
			return err
		}, func(err error) bool { return err == nil }},
		{"machine reads server endpoints", func() error {
			_, err := holderCert.MusterV1alpha1().ServerEndpoints().List(ctx, metav1.ListOptions{})
			return err
		}, func(err error) bool { return err == nil }},
		{"machine heartbeats", func() error { return heartbeat(ctx, holderCert) }, func(err error) bool { return err == nil }},
		{"bootstrap token heartbeats", func() error { return heartbeat(ctx, bootstrap) }, apierrors.IsForbidden},
		{"anonymous heartbeat", func() error { return heartbeat(ctx, anonymous) }, apierrors.IsUnauthorized},
		{"oversized labels", func() error {
			return createRegistration(ctx, bootstrap, "big", func(r *api.ClusterRegistration) {
				r.Spec.Labels = map[string]string{}
				for i := 0; i < 65; i++ {
					r.Spec.Labels[fmt.Sprintf("l%d", i)] = "x"
				}
			})
		}, apierrors.IsInvalid},
		{"oversized CSR", func() error {
			return createRegistration(ctx, bootstrap, "bigcsr", func(r *api.ClusterRegistration) { r.Spec.CSR = make([]byte, 9<<10) })
		}, apierrors.IsInvalid},
		{"name not derived from clientID and clientRandom", func() error {
			return createRegistration(ctx, bootstrap, "renamed", func(r *api.ClusterRegistration) { r.Name = "c-chosen" })
		}, apierrors.IsInvalid},
		{"CSR not signed by the key it carries", func() error {
			before := s.mustKubectl("get", "clusterregistrations,machines,nodepasswords", "-o", "name")
			err := createRegistration(ctx, bootstrap, "forged", func(r *api.ClusterRegistration) {
				block, _ := pem.Decode(r.Spec.CSR)
				block.Bytes[len(block.Bytes)-1] ^= 0xff // the signature's last byte
				r.Spec.CSR = pem.EncodeToMemory(block)
			})
			if after := s.mustKubectl("get", "clusterregistrations,machines,nodepasswords", "-o", "name"); after != before {
				return fmt.Errorf("a refused registration changed state (%v):\nbefore:\n%s\nafter:\n%s", err, before, after)
			}
			return err
		}, func(err error) bool {
			return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "signature is invalid")
		}},
		{"weak node password", func() error {
			return createRegistration(ctx, bootstrap, "weakpw", func(r *api.ClusterRegistration) { r.Spec.NodePassword = "hunter2" })
		}, apierrors.IsInvalid},
	}
	for _, tc := range requestCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !tc.want(err) {
				t.Errorf("got %v", err)
			}
		})
	}

	t.Run("CSR asking for another identity", func(t *testing.T) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "muster-admin", Organization: []string{"system:masters"}}}, key)
		name := ""
		err := createRegistration(ctx, bootstrap, "greedy", func(r *api.ClusterRegistration) {
			r.Spec.CSR = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
			name = r.Name
		})
		if err != nil {
			t.Fatal(err)
		}
		s.mustKubectl("wait", "clusterregistration/"+name, "--for=jsonpath={.status.phase}=Granted", "--timeout=30s")
		reg, err := bootstrap.MusterV1alpha1().ClusterRegistrations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		certs, err := pki.ParseCertsPEM(reg.Status.Certificate)
		if err != nil || len(certs) == 0 {
			t.Fatalf("granted certificate: %v", err)
		}
		if cn, orgs := certs[0].Subject.CommonName, certs[0].Subject.Organization; cn != "muster:machine:greedy" || strings.Contains(strings.Join(orgs, ","), "system:masters") {
			t.Errorf("the CSR chose its identity: CN %q O %v", cn, orgs)
		}
	})

	t.Run("deleted machine's certificate", func(t *testing.T) {
		s.mustKubectl("delete", "machine", "taken")
		_, err := holderCert.MusterV1alpha1().Machines().Get(ctx, "taken", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no longer exists") {
			t.Errorf("a deleted machine's certificate still works: %v", err)
		}
		if err := heartbeat(ctx, holderCert); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no longer exists") {
			t.Errorf("a deleted machine's certificate still heartbeats: %v", err)
		}
	})
}

// TestFiftyAgentsJoinAtOnce: one token, 50 agent processes at once → 50
// machines, 50 granted registrations, no orphans.
func TestFiftyAgentsJoinAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	const n = 50
	agents := make([]*agentProc, n)
	start := time.Now()
	for i := range agents {
		agents[i] = startAgent(t, s, t.TempDir(), "--token", token, "--node-name", fmt.Sprintf("fleet-%02d", i))
	}
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func(i int, a *agentProc) {
			defer wg.Done()
			a.waitOutput(fmt.Sprintf("running as machine fleet-%02d", i), 120*time.Second)
		}(i, a)
	}
	wg.Wait()
	t.Logf("%d agents joined in %s", n, time.Since(start).Round(time.Millisecond))
	count := func(kind, jsonpath string) int {
		out := strings.Fields(s.mustKubectl("get", kind, "-o", "jsonpath="+jsonpath))
		return len(out)
	}
	if got := count("machines", "{.items[*].metadata.name}"); got != n {
		t.Errorf("%d machines, want %d", got, n)
	}
	if got := count("clusterregistrations", "{.items[*].metadata.name}"); got != n {
		t.Errorf("%d registrations, want %d (no orphans)", got, n)
	}
	out := s.mustKubectl("get", "clusterregistrations", "-o", "jsonpath={.items[*].status.phase}")
	if strings.Count(out, "Granted") != n {
		t.Errorf("not all registrations granted: %s", out)
	}
}

// TestConcurrentRegistrationsFromOneClient: retries and concurrent requests
// from one clientID end as one Machine and one registration (Fleet once piled
// up thousands of orphaned requests).
func TestConcurrentRegistrationsFromOneClient(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	c := clientset.NewForConfigOrDie(&rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", s.port),
		BearerToken: token[strings.Index(token, "::")+2:], TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	const attempts = 8
	var wg sync.WaitGroup
	errs := make(chan error, attempts)
	for i := 0; i < attempts; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs <- createRegistration(context.Background(), c, "retrying-node", func(r *api.ClusterRegistration) {
				r.Spec.ClientRandom = fmt.Sprintf("attempt%d", i)
				r.Name = api.RegistrationName(r.Spec.ClientID, r.Spec.ClientRandom)
			})
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a registration attempt failed: %v", err)
		}
	}
	waitFor(t, 30*time.Second, "one granted registration left", func() bool {
		out := s.mustKubectl("get", "clusterregistrations", "-o", "jsonpath={.items[*].status.phase}")
		if out != "Granted" {
			t.Logf("registrations: %s", out)
		}
		return out == "Granted"
	})
	if out := s.mustKubectl("get", "machines", "-o", "name"); strings.TrimSpace(out) != "machine.muster.io/retrying-node" {
		t.Errorf("machines after %d attempts: %q", attempts, out)
	}
}

package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// TestAuthorizationThatHeld keeps what the adversarial reviews of issue 13
// found holding: against a real server, with a real agent's certificate and
// real join tokens, each request gets exactly the answer below.
func TestAuthorizationThatHeld(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	tokenA, tokenB := newToken(t, s), newToken(t, s)
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token", tokenA, "--node-name", "held-1")
	a.waitOutput("running as machine held-1", 60*time.Second)
	uid := s.mustKubectl("get", "machine", "held-1", "-o", "jsonpath={.metadata.uid}")
	reg := s.mustKubectl("get", "clusterregistrations", "-o", "jsonpath={.items[0].metadata.name}")

	machine := certHTTPClient(t, s, dir)
	anonymous := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	bearer := func(token string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + bearerOf(token)}
	}
	plus := func(a, b map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range a {
			m[k] = v
		}
		for k, v := range b {
			m[k] = v
		}
		return m
	}
	const apis = "/apis/muster.io/v1alpha1"
	forgedAdmin := map[string]string{"X-Remote-User": "muster-admin", "X-Remote-Group": "system:masters"}
	forgedMachine := map[string]string{"X-Remote-User": "muster:machine:held-1", "X-Remote-Group": "muster:machine-uid:" + uid}
	impersonateAdmin := map[string]string{"Impersonate-User": "muster-admin", "Impersonate-Group": "system:masters"}
	impersonateMachine := map[string]string{"Impersonate-User": "muster:machine:held-1", "Impersonate-Group": "muster:machines"}

	cases := []struct {
		name    string
		client  *http.Client
		path    string
		headers map[string]string
		want    int
	}{
		// A machine certificate reaches only its own objects.
		{"machine reads its own Machine", machine, apis + "/machines/held-1", nil, http.StatusOK},
		{"machine lists its own Machine by name", machine, apis + "/machines?fieldSelector=metadata.name%3Dheld-1", nil, http.StatusOK},
		{"machine lists machines without its name", machine, apis + "/machines", nil, http.StatusForbidden},
		{"machine lists plans without its name", machine, apis + "/machineplans", nil, http.StatusForbidden},
		{"machine reads /liveness", machine, "/liveness", nil, http.StatusForbidden},
		{"machine reads /metrics", machine, "/metrics", nil, http.StatusForbidden},
		{"machine reads /debug/pprof", machine, "/debug/pprof/", nil, http.StatusForbidden},
		{"machine reads /openapi/v2", machine, "/openapi/v2", nil, http.StatusForbidden},
		{"machine reads /openapi/v3", machine, "/openapi/v3", nil, http.StatusForbidden},
		{"machine lists registrations", machine, apis + "/clusterregistrations", nil, http.StatusForbidden},
		// Identity headers from clients are not trusted.
		{"machine impersonates an admin", machine, apis + "/machines", impersonateAdmin, http.StatusForbidden},
		{"machine sends X-Remote-User admin", machine, apis + "/machines", forgedAdmin, http.StatusForbidden},
		{"anonymous sends X-Remote-User of the machine", anonymous, apis + "/machines/held-1", forgedMachine, http.StatusUnauthorized},
		{"anonymous impersonates the machine", anonymous, apis + "/machines/held-1", impersonateMachine, http.StatusUnauthorized},
		{"anonymous heartbeat with X-Remote-User of the machine", anonymous, "/heartbeat", forgedMachine, http.StatusUnauthorized},
		{"anonymous heartbeat impersonating the machine", anonymous, "/heartbeat", impersonateMachine, http.StatusUnauthorized},
		{"join token heartbeat with X-Remote-User of the machine", anonymous, "/heartbeat", plus(bearer(tokenA), forgedMachine), http.StatusForbidden},
		{"join token impersonates an admin", anonymous, apis + "/machines", plus(bearer(tokenA), impersonateAdmin), http.StatusForbidden},
		{"join token sends X-Remote-Group system:masters", anonymous, apis + "/machines", plus(bearer(tokenA), forgedAdmin), http.StatusForbidden},
		{"machine heartbeat with X-Remote-User admin", machine, "/heartbeat", forgedAdmin, http.StatusNoContent},
		// A join token reads only its own registration.
		{"join token reads its own registration", anonymous, apis + "/clusterregistrations/" + reg, bearer(tokenA), http.StatusOK},
		{"join token reads another token's registration", anonymous, apis + "/clusterregistrations/" + reg, bearer(tokenB), http.StatusForbidden},
		{"join token lists registrations", anonymous, apis + "/clusterregistrations", bearer(tokenA), http.StatusForbidden},
		{"join token reads a machine", anonymous, apis + "/machines/held-1", bearer(tokenA), http.StatusForbidden},
		{"anonymous lists machines", anonymous, apis + "/machines", nil, http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, body := do(t, tc.client, s, http.MethodGet, tc.path, nil, tc.headers); code != tc.want {
				t.Errorf("GET %s: %d, want %d: %.300s", tc.path, code, tc.want, body)
			}
		})
	}

	caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	certClient := clientset.NewForConfigOrDie(&rest.Config{Host: s.url(), TLSClientConfig: rest.TLSClientConfig{
		CAData: caPEM, CertFile: filepath.Join(dir, "client.crt"), KeyFile: filepath.Join(dir, "client.key")}})
	t.Run("machine renews for another node", func(t *testing.T) {
		err := createRegistration(context.Background(), certClient, "not-held-1", func(*api.ClusterRegistration) {})
		if !apierrors.IsForbidden(err) {
			t.Errorf("got %v, want 403", err)
		}
	})

	t.Run("TLS below 1.2 is refused", func(t *testing.T) {
		for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(s.url(), "https://"),
				&tls.Config{RootCAs: s.caPool(), MinVersion: v, MaxVersion: v})
			if err == nil {
				conn.Close()
				t.Errorf("a TLS %s handshake succeeded", tls.VersionName(v))
			}
		}
	})

	t.Run("machine renews after its Machine was deleted", func(t *testing.T) {
		a.kill()
		s.mustKubectl("delete", "machine", "held-1")
		waitFor(t, 10*time.Second, "the deleted machine's certificate is refused", func() bool {
			code, _, _ := do(t, machine, s, http.MethodGet, "/heartbeat", nil, nil)
			return code == http.StatusForbidden
		})
		err := createRegistration(context.Background(), certClient, "held-1", func(*api.ClusterRegistration) {})
		if !apierrors.IsForbidden(err) {
			t.Errorf("got %v, want 403", err)
		}
	})
}

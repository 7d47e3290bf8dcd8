package registry

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// clusterAPI is a valid spec.kubernetesAPI with a real CA and client pair.
func clusterAPI(t *testing.T) *api.ClusterKubernetesAPI {
	t.Helper()
	ca, err := pki.NewCA("downstream")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueClient("muster-proxy", []string{"system:masters"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueServing("x", nil, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return &api.ClusterKubernetesAPI{Port: 6443, CACertificate: string(ca.CertPEM), Credential: api.ClusterAPICredential{ClientCertificate: string(cert), ClientKey: string(key)}}
}

// TestRedactCluster: the credential's key and token read as the marker,
// the CA and certificate stay (they are not secret, and show which
// credential is set), and the stored object is never changed.
func TestRedactCluster(t *testing.T) {
	k := clusterAPI(t)
	for _, cred := range []api.ClusterAPICredential{k.Credential, {Token: testSecret}} {
		c := &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Annotations: map[string]string{lastApplied: cred.ClientKey + cred.Token}},
			Spec: api.ClusterSpec{KubernetesAPI: &api.ClusterKubernetesAPI{CACertificate: k.CACertificate, Credential: cred}}}
		before, _ := json.Marshal(c)
		got := redacted(&api.ClusterList{Items: []api.Cluster{*c}}).(*api.ClusterList).Items[0]
		if after, _ := json.Marshal(c); string(after) != string(before) {
			t.Fatal("redacting changed the stored object")
		}
		out, _ := json.Marshal(got)
		if strings.Contains(string(out), testSecret) || strings.Contains(string(out), "PRIVATE KEY") {
			t.Errorf("the redacted cluster holds the secret: %s", out)
		}
		g := got.Spec.KubernetesAPI
		if g.CACertificate != k.CACertificate || g.Credential.ClientCertificate != cred.ClientCertificate || got.Annotations[lastApplied] != api.Redacted {
			t.Errorf("redacted too much or too little: %+v", got)
		}
	}
	if holdsSecrets(&api.Machine{}) || !holdsSecrets(&api.Cluster{}) || !holdsSecrets(&api.ClusterList{}) {
		t.Error("holdsSecrets is wrong about clusters or machines")
	}
}

// TestValidateKubernetesAPI: what the proxy needs is checked at the door,
// with words that say what to write, and never quoting the key.
func TestValidateKubernetesAPI(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*api.ClusterKubernetesAPI)
		says   string
	}{
		{"valid", func(*api.ClusterKubernetesAPI) {}, ""},
		{"a token instead", func(k *api.ClusterKubernetesAPI) { k.Credential = api.ClusterAPICredential{Token: "t"} }, ""},
		{"port out of range", func(k *api.ClusterKubernetesAPI) { k.Port = 70000 }, "1 to 65535"},
		{"no CA", func(k *api.ClusterKubernetesAPI) { k.CACertificate = "" }, "PEM CA bundle"},
		{"CA not PEM", func(k *api.ClusterKubernetesAPI) { k.CACertificate = "junk" }, "holds no PEM certificate"},
		{"no credential", func(k *api.ClusterKubernetesAPI) { k.Credential = api.ClusterAPICredential{} }, "allowed to impersonate"},
		{"both", func(k *api.ClusterKubernetesAPI) { k.Credential.Token = "t" }, "not both"},
		{"key of another cert", func(k *api.ClusterKubernetesAPI) { k.Credential.ClientKey = clusterAPI(t).Credential.ClientKey }, "not a PEM certificate and its private key"},
		{"redacted key written back", func(k *api.ClusterKubernetesAPI) { k.Credential.ClientKey = api.Redacted }, "write the real value"},
		{"redacted token written back", func(k *api.ClusterKubernetesAPI) { k.Credential = api.ClusterAPICredential{Token: api.Redacted} }, "write the real value"},
	} {
		k := clusterAPI(t)
		tc.mutate(k)
		errs := Cluster.Validate(&api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod"}, Spec: api.ClusterSpec{KubernetesAPI: k}})
		got := errs.ToAggregate()
		switch {
		case tc.says == "" && got != nil:
			t.Errorf("%s: refused: %v", tc.name, got)
		case tc.says != "" && (got == nil || !strings.Contains(got.Error(), tc.says)):
			t.Errorf("%s: %v; want an error saying %q", tc.name, got, tc.says)
		case got != nil && strings.Contains(got.Error(), "PRIVATE KEY"):
			t.Errorf("%s: the error quotes the key: %v", tc.name, got)
		}
	}
}

package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/snapshot"
)

// clusterEncryptionConfig encrypts Clusters (their API credential) beside
// the plans, with one aesgcm key.
func clusterEncryptionConfig(t testing.TB, key string) string {
	t.Helper()
	body := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources:\n      - machineplans.muster.io\n      - machineplansets.muster.io\n      - clusters.muster.io\n    providers:\n      - aesgcm:\n          keys:\n            - name: key1\n              secret: " + key + "\n"
	f := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestEncryptionAtRestClusterCredential (issue 30): with Clusters named in
// --encryption-provider-config, the credential the server reaches a
// cluster's kube-apiserver with (spec.kubernetesAPI.credential, for the
// /k8s/clusters proxy) is found neither in the datastore (SQLite's files,
// PostgreSQL's kine table) nor in a snapshot, while a Machine's annotation
// (not encrypted) is, so the search would have found it. An administrator
// reads the credential whole, and the transition history still records
// the encrypted Cluster's transitions: its writer reads Clusters decrypted.
func TestEncryptionAtRestClusterCredential(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		secret := "cluster-token-" + hex.EncodeToString(b)
		control := "cluster-control-" + hex.EncodeToString(b)
		key := encryptionKey(t)
		s := startServer(t, endpoint, "--encryption-provider-config", clusterEncryptionConfig(t, key))
		ca, err := pki.NewCA("downstream-ca")
		if err != nil {
			t.Fatal(err)
		}
		manifest := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Cluster
metadata:
  name: enc-cluster
spec:
  kubernetesAPI:
    caCertificate: |
%s
    credential:
      token: %s
---
apiVersion: muster.io/v1alpha1
kind: Machine
metadata:
  name: enc-cluster-1
  annotations:
    note: %s
spec:
  cluster: enc-cluster
`, indentPEM(6, ca.CertPEM), secret, control)
		manifestFile := filepath.Join(t.TempDir(), "cluster.yaml")
		if err := os.WriteFile(manifestFile, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		// create, not apply: apply would keep a copy in an annotation.
		s.mustKubectl("create", "-f", manifestFile)
		if got := s.mustKubectl("get", "cluster", "enc-cluster", "-o", "jsonpath={.spec.kubernetesAPI.credential.token}"); got != secret {
			t.Fatalf("the admin reads the cluster's token as %q, want it whole", got)
		}
		// The history writer reads the encrypted Cluster: its first
		// transition is recorded.
		waitFor(t, 60*time.Second, "the encrypted cluster's transitions in the history", func() bool {
			out, err := historyCLI(s, "cluster/enc-cluster")
			return err == nil && strings.Contains(out, "enc-cluster")
		})
		if strings.Contains(s.log.String(), "Transition history writer stopped") {
			t.Errorf("the history writer failed on an encrypted Cluster:\n%s", s.log.String())
		}

		snap := filepath.Join(t.TempDir(), "muster.snapshot")
		if out, err := datastoreCLI(s, []string{"MUSTER_DATASTORE_ENDPOINT=" + endpoint}, "datastore", "snapshot", snap); err != nil {
			t.Fatalf("datastore snapshot: %v\n%s", err, out)
		}
		// A snapshot holds each value base64-encoded (JSON): search the
		// decoded values.
		_, entries, err := snapshot.Read(snap)
		if err != nil {
			t.Fatal(err)
		}
		var snapBytes []byte
		for _, e := range entries {
			snapBytes = append(append(snapBytes, e.Key...), e.Value...)
		}
		for what, stored := range map[string][]byte{"the datastore": storedBytes(t, s, endpoint), "the snapshot": snapBytes} {
			if !bytes.Contains(stored, []byte(control)) {
				t.Fatalf("%s does not hold the Machine's annotation in plaintext: the search below would prove nothing", what)
			}
			if bytes.Contains(stored, []byte(secret)) {
				t.Errorf("%s holds the cluster's API credential in plaintext", what)
			}
		}
		if strings.Contains(s.log.String(), secret) || strings.Contains(s.log.String(), key) {
			t.Errorf("the server's log holds the credential or the key")
		}
	})
}

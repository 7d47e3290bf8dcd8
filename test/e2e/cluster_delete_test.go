package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterDeleteRefusedWithMachines: deleting a Cluster does not delete its
// Machines, so the server refuses to delete one that has any, dry run
// included, and says how to delete them; once they are gone, it deletes.
func TestClusterDeleteRefusedWithMachines(t *testing.T) {
	s := startServer(t, "")
	f := filepath.Join(t.TempDir(), "objects.yaml")
	doc := `apiVersion: muster.io/v1alpha1
kind: Cluster
metadata:
  name: prod
---
apiVersion: muster.io/v1alpha1
kind: Cluster
metadata:
  name: empty
---
apiVersion: muster.io/v1alpha1
kind: Machine
metadata:
  name: web1
  labels: {tier: web}
spec:
  cluster: prod
---
apiVersion: muster.io/v1alpha1
kind: Machine
metadata:
  name: web2
  labels: {tier: web}
spec:
  cluster: prod
`
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", f)

	refused := func(args ...string) {
		t.Helper()
		out, err := s.kubectl(args...)
		if err == nil {
			t.Fatalf("kubectl %s succeeded on a cluster with machines:\n%s", strings.Join(args, " "), out)
		}
		for _, want := range []string{"cluster prod still has 2 machines", "kubectl delete machines --field-selector spec.cluster=prod"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl %s said %q; want it to contain %q", strings.Join(args, " "), out, want)
			}
		}
		if _, err := s.kubectl("get", "cluster", "prod"); err != nil {
			t.Fatalf("cluster prod is gone after a refused kubectl %s", strings.Join(args, " "))
		}
	}
	refused("delete", "cluster", "prod", "--dry-run=server")
	refused("delete", "cluster", "prod")
	// A collection delete is refused as a whole: the empty cluster stays too.
	refused("delete", "--raw", "/apis/muster.io/v1alpha1/clusters")
	if _, err := s.kubectl("get", "cluster", "empty"); err != nil {
		t.Fatal("a refused collection delete deleted the empty cluster")
	}

	// What the message says to do.
	s.mustKubectl("delete", "machines", "--field-selector", "spec.cluster=prod", "--wait=true", "--timeout=60s")
	if out := s.mustKubectl("get", "machines", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("machines left after deleting them: %s", out)
	}
	s.mustKubectl("delete", "cluster", "prod", "--dry-run=server")
	if _, err := s.kubectl("get", "cluster", "prod"); err != nil {
		t.Fatal("a dry-run delete deleted the cluster")
	}
	s.mustKubectl("delete", "cluster", "prod", "empty")
	if out := s.mustKubectl("get", "clusters", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("clusters left after deleting them: %s", out)
	}
}

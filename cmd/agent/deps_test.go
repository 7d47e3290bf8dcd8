package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentLinksNoServerCode keeps the agent small on every machine: the
// server's packages (the apiserver library, kine, the etcd client and
// server, muster's server side) must never reach its binary. One import of a
// signal helper from k8s.io/apiserver once made it 74 MB; the generated
// clientset, whose discovery client registers every Kubernetes API group,
// cost another 14 MB (30 -> 16.5 MB stripped): the agent uses the typed
// muster.io client alone.
func TestAgentLinksNoServerCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	// Each forbids the package and those under it.
	forbidden := []string{
		"k8s.io/apiserver", "github.com/k3s-io/kine", "go.etcd.io/etcd",
		"k8s.io/api", "k8s.io/client-go/kubernetes", "k8s.io/client-go/discovery",
		"github.com/muster-io/muster/pkg/client/informers",
		"github.com/muster-io/muster/internal/apiserver", "github.com/muster-io/muster/internal/registry",
		"github.com/muster-io/muster/internal/server", "github.com/muster-io/muster/internal/store",
		"github.com/muster-io/muster/internal/join", "github.com/muster-io/muster/internal/lifecycle",
		"github.com/muster-io/muster/internal/liveness",
		"github.com/mattn/go-sqlite3", "github.com/jackc/pgx",
	}
	// The clientset itself, not its typed client and scheme below it.
	const clientset = "github.com/muster-io/muster/pkg/client/clientset/versioned"
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps printed %d packages: the check would be vacuous", len(deps))
	}
	for _, dep := range deps {
		if dep == clientset {
			t.Errorf("the agent links %s: use its typed client (versioned/typed/muster/v1alpha1)", dep)
		}
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("the agent links %s: server code has reached muster-agent", dep)
			}
		}
	}
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// poolMachines lists the pool's Machines and their phases.
func poolMachines(s *server, pool string) map[string]string {
	out, err := s.kubectl("get", "machines", "-l", "muster.io/pool="+pool, "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}`)
	got := map[string]string{}
	if err != nil {
		return got
	}
	for _, line := range strings.Fields(out) {
		name, phase, _ := strings.Cut(line, "=")
		got[name] = phase
	}
	return got
}

// poolAgents are the process-driver agents of s running on this host, by
// machine: read from /proc, not from the server's pid files, so a process
// the server lost track of counts too.
func poolAgents(s *server) map[string]int {
	dir := processMachines(s) + "/"
	got := map[string]int{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(stat), ") Z ") {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		for i, a := range args {
			if a == "--data-dir" && i+1 < len(args) && strings.HasPrefix(args[i+1], dir) {
				got[strings.SplitN(strings.TrimPrefix(args[i+1], dir), "/", 2)[0]] = pid
			}
		}
	}
	return got
}

// killPoolAgentsAtEnd kills what s's process driver started when the test
// ends: its agents outlive the server by design, as hosts would.
func killPoolAgentsAtEnd(t testing.TB, s *server) {
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := s.kubectl("get", "machines", "-o", "wide")
			t.Logf("at the failure: machines\n%s\nagent processes %v\nthe end of the server's log:\n%s", out, poolAgents(s), lastLines(s.log.String(), 60))
		}
		for _, pid := range poolAgents(s) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}

func applyPool(t testing.TB, s *server, manifest string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", path)
}

// applySet applies a MachinePlanSet from YAML, failing the test if refused.
func applySet(t *testing.T, s *server, doc string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "set.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", f)
}

// setDoc is a plan set whose plan writes content to $PLANSET_OUT/set.conf:
// the agents of this test share one host, so each is given its own
// directory in its environment, which its instructions inherit.
func setDoc(name, selector, content string, extra string) string {
	return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePlanSet
metadata:
  name: %s
spec:
  selector: {matchLabels: {%s}}
%s  template:
    maxFailures: 1
    instructions:
    - name: write
      command: /bin/sh
      args: ["-c", "printf '%s' > \"$PLANSET_OUT/set.conf\""]
`, name, selector, extra, content)
}

// setCondition is a set's generation, observed generation and a condition's
// status and reason, e.g. "2 2 True RolledOut".
func setCondition(s *server, set, cond string) string {
	out, _ := s.kubectl("get", "machineplanset", set, "-o",
		fmt.Sprintf(`jsonpath={.metadata.generation} {.status.observedGeneration} {.status.conditions[?(@.type=="%s")].status} {.status.conditions[?(@.type=="%s")].reason}`, cond, cond))
	return out
}

func readConf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "set.conf"))
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// setPlan gives machine a plan that runs one command, retrying conflicts
// with the agent's status writes.
func setPlan(t *testing.T, c clientset.Interface, machine, command string) {
	t.Helper()
	plans := c.MusterV1alpha1().MachinePlans()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := plans.Get(context.Background(), machine, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.Instructions = []api.PlanInstruction{{Name: "run", Command: "/bin/sh", Args: []string{"-c", command}}}
		_, err = plans.Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("setting the plan of %s: %v", machine, err)
	}
}

// applyPlan applies a MachinePlan for machine from a spec written in YAML.
func applyPlan(t *testing.T, s *server, machine, spec string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "plan.yaml")
	doc := fmt.Sprintf("apiVersion: muster.io/v1alpha1\nkind: MachinePlan\nmetadata:\n  name: %s\nspec:\n%s", machine, spec)
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "--server-side", "--force-conflicts", "-f", f)
}

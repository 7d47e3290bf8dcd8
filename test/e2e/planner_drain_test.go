package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// workerDrainWatch watches, during a version change, the worker's plan's
// version, its Node and a Pod bound to it, all read as a user would: the
// plan through Muster, the Node and Pod through Muster's proxy.
type workerDrainWatch struct {
	worker  string
	stop    chan struct{}
	stopped chan struct{}
	mu      sync.Mutex
	drained string // a sample while the plan was still at the old version, the Node cordoned, the Pod evicted
	samples []string
}

// watchWorkerDrain (issue 29: workers drained before their upgrade)
// binds a Pod to the cluster's worker (spec.nodeName: no kubelet runs, so
// it stays Pending, but a drain evicts it all the same), then samples,
// until check, the worker's plan's version label, its Node's
// spec.unschedulable and the Pod.
func watchWorkerDrain(t *testing.T, s *server, kc, cluster, from string) *workerDrainWatch {
	t.Helper()
	workers := poolMachines(s, cluster+"-workers")
	if len(workers) != 1 {
		t.Fatalf("pool %s-workers has machines %v; want 1", cluster, workers)
	}
	w := &workerDrainWatch{stop: make(chan struct{}), stopped: make(chan struct{})}
	for m := range workers {
		w.worker = m
	}
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: drain-me, namespace: default}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 3
  automountServiceAccountToken: false
  containers: [{name: pause, image: registry.k8s.io/pause:3.10}]
`, w.worker)
	f := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(f, []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	// The default ServiceAccount comes with kube-controller-manager's
	// first passes: retried until the Pod is admitted.
	waitFor(t, 60*time.Second, "a Pod bound to worker "+w.worker+" created through Muster's proxy", func() bool {
		out, err := kubectlAs(kc, "apply", "-f", f)
		if err != nil {
			t.Logf("kubectl apply (pod): %v: %s", err, out)
		}
		return err == nil
	})
	version := func() string {
		out, _ := s.kubectl("get", "machineplan", w.worker, "-o", `jsonpath={.metadata.labels.muster\.io/planner-version}`)
		return strings.TrimSpace(out)
	}
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			// The plan's version before and after reading the Node and
			// the Pod: the same old version both times means both were
			// read before the worker's plan was rewritten.
			before := version()
			node, nerr := kubectlAs(kc, "get", "node", w.worker, "-o", "jsonpath=unschedulable={.spec.unschedulable}")
			p, perr := kubectlAs(kc, "get", "pod", "drain-me", "-n", "default", "--ignore-not-found", "-o", "jsonpath=deletionTimestamp={.metadata.deletionTimestamp}")
			after := version()
			if nerr != nil || perr != nil {
				continue // the proxied API blinks while a kube-apiserver restarts
			}
			evicted := strings.TrimSpace(p) == "" || !strings.HasSuffix(strings.TrimSpace(p), "deletionTimestamp=")
			sample := fmt.Sprintf("plan %s..%s node %s pod %q", before, after, strings.TrimSpace(node), strings.TrimSpace(p))
			w.mu.Lock()
			if n := len(w.samples); n == 0 || w.samples[n-1] != sample {
				w.samples = append(w.samples, sample)
			}
			if before == from && after == from && strings.TrimSpace(node) == "unschedulable=true" && evicted && w.drained == "" {
				w.drained = sample
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// check, once the cluster runs the new version: the worker was cordoned
// and its Pod evicted while its plan was still at the old version, and its
// Node is schedulable again.
func (w *workerDrainWatch) check(t *testing.T, kc string) {
	t.Helper()
	close(w.stop)
	<-w.stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drained == "" {
		t.Errorf("worker %s was never seen cordoned with its Pod evicted while its plan was at the old version; samples (plan version before..after, Node, Pod):\n%s",
			w.worker, strings.Join(w.samples, "\n"))
	} else {
		t.Logf("worker %s drained before its plan was rewritten: %s", w.worker, w.drained)
	}
	out, err := kubectlAs(kc, "get", "node", w.worker, "-o", "jsonpath=unschedulable={.spec.unschedulable}")
	if err != nil || strings.TrimSpace(out) != "unschedulable=" {
		t.Errorf("after the upgrade, worker %s's Node says %q (%v); want it schedulable again (uncordoned)", w.worker, out, err)
	}
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/internal/manifests"
	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// TestBenchPeer runs one workload, with the same client-go code, against
// muster and against what Fleet/Rancher/k3s users run for the job: a real
// kube-apiserver serving the Muster kinds as CRDs (converted from muster's
// own OpenAPI, so the two cannot drift) on a standalone kine on SQLite.
// Each phase runs on muster, then on the peer, so that noise on the shared
// machine falls on both. It prints a table and asserts nothing about speed.
// `make test` runs it at smoke scale so that it cannot rot; `make
// bench-peer` at full scale (MUSTER_BENCH_PEER_OBJECTS=5000,
// MUSTER_BENCH_PEER_WATCHES=2000).
func TestBenchPeer(t *testing.T) {
	// Not parallel: measures figures, so it runs alone.
	objects := envInt(t, "MUSTER_BENCH_PEER_OBJECTS", 200)
	watches := envInt(t, "MUSTER_BENCH_PEER_WATCHES", 100)
	clients := envInt(t, "MUSTER_BENCH_PEER_CLIENTS", 64)
	rounds := 5 // watch events per watch: each round is one status write every watch sees

	kube, _ := startKubeAPIServer(t, peerDir(t))
	peerCfg := &rest.Config{Host: kube.url, BearerToken: "admin-token", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	applyCRDs(t, peerCfg)
	s := startServer(t, "")
	musterCfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	targets := []*benchTarget{
		{name: "Muster", cfg: musterCfg, pids: []int{s.cmd.Process.Pid}},
		{name: "peer", cfg: peerCfg, pids: kube.pids},
	}
	for _, tg := range targets {
		// The 64 clients are goroutines sharing one clientset, as the
		// controllers of one process do; client-side rate limiting would
		// measure client-go, not the server.
		tg.cfg.QPS, tg.cfg.Burst = 1e6, 1e6
		tg.cs = clientset.NewForConfigOrDie(tg.cfg)
		tg.figures = map[string]float64{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	name := func(i int) string { return fmt.Sprintf("bench-%05d", i) }

	// Run each phase on muster, then on the peer.
	each := func(phase func(tg *benchTarget)) {
		for _, tg := range targets {
			phase(tg)
		}
	}
	each(func(tg *benchTarget) {
		tg.set("RSS at start, MiB", float64(tg.rssKiB())/1024)
		// Machines name their Cluster; the same one exists on both.
		if _, err := tg.cs.MusterV1alpha1().Clusters().Create(ctx, &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: create cluster: %v", tg.name, err)
		}
	})
	each(func(tg *benchTarget) {
		tg.rate(t, "create", objects, clients, func(i int) error {
			m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name(i)}, Spec: v1alpha1.MachineSpec{Cluster: "bench", Roles: []string{"worker"}}}
			_, err := tg.cs.MusterV1alpha1().Machines().Create(ctx, m, metav1.CreateOptions{})
			return err
		})
	})
	each(func(tg *benchTarget) {
		tg.rate(t, "get", objects, clients, func(i int) error {
			_, err := tg.cs.MusterV1alpha1().Machines().Get(ctx, name(i), metav1.GetOptions{})
			return err
		})
	})
	each(func(tg *benchTarget) {
		// What an agent reports: its version, through the status
		// subresource. A merge patch, so that muster's own status writes
		// (the lifecycle controller) cause no conflicts to retry.
		patch := []byte(`{"status":{"agentVersion":"v1.0.0-bench"}}`)
		tg.rate(t, "status update", objects, clients, func(i int) error {
			_, err := tg.cs.MusterV1alpha1().Machines().Patch(ctx, name(i), types.MergePatchType, patch, metav1.PatchOptions{}, "status")
			return err
		})
		tg.set("RSS after writes, MiB", float64(tg.rssKiB())/1024)
	})
	each(func(tg *benchTarget) {
		tg.latency(t, fmt.Sprintf("full list of %d, ms", objects), func() error {
			l, err := tg.cs.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) != objects {
				err = fmt.Errorf("listed %d machines, want %d", len(l.Items), objects)
			}
			return err
		})
	})
	each(func(tg *benchTarget) {
		tg.latency(t, "paged list walk (limit 500), ms", func() error {
			got, cont := 0, ""
			for {
				l, err := tg.cs.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
				if err != nil {
					return err
				}
				got += len(l.Items)
				if cont = l.Continue; cont == "" {
					break
				}
			}
			if got != objects {
				return fmt.Errorf("walked %d machines, want %d", got, objects)
			}
			return nil
		})
	})
	each(func(tg *benchTarget) { tg.watch(t, ctx, watches, clients, rounds) })

	var b strings.Builder
	fmt.Fprintf(&b, "%d objects, %d clients, %d watches (%d events each), %s\n", objects, clients, watches, rounds, time.Now().UTC().Format("2006-01-02"))
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "figure\tMuster\tpeer\tMuster/peer\t")
	for _, f := range targets[0].order {
		m, p := targets[0].figures[f], targets[1].figures[f]
		ratio := "-"
		if p != 0 {
			ratio = fmt.Sprintf("%.2f", m/p)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t\n", f, figure(m), figure(p), ratio)
	}
	_ = w.Flush()
	t.Log("\n" + b.String())
}

// benchTarget is one server under the workload, its processes and figures.
type benchTarget struct {
	name    string
	cfg     *rest.Config
	cs      clientset.Interface
	pids    []int
	figures map[string]float64
	order   []string // figure names in the order measured
}

func (tg *benchTarget) set(name string, v float64) {
	if _, ok := tg.figures[name]; !ok {
		tg.order = append(tg.order, name)
	}
	tg.figures[name] = v
}

func (tg *benchTarget) rssKiB() int {
	total := 0
	for _, pid := range tg.pids {
		total += rssKiB(pid)
	}
	return total
}

func (tg *benchTarget) cpu() float64 {
	total := 0.0
	for _, pid := range tg.pids {
		total += cpuSeconds(pid)
	}
	return total
}

// rate runs op for 0..n-1 on the given number of concurrent clients and
// records operations per second and the server's CPU per operation.
func (tg *benchTarget) rate(t *testing.T, what string, n, clients int, op func(i int) error) {
	t.Helper()
	profiled := tg.profile(t, what)
	defer profiled()
	cpu0, start := tg.cpu(), time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := op(i); err != nil {
					once.Do(func() { first = fmt.Errorf("%s %d: %w", what, i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		t.Fatalf("%s: %v", tg.name, first)
	}
	tg.set(what+", per s", float64(n)/elapsed.Seconds())
	tg.set(what+", server CPU ms per op", (tg.cpu()-cpu0)*1000/float64(n))
}

// profile, when MUSTER_BENCH_PEER_PROFILE names a directory, takes a
// 3-second CPU profile of muster while a phase runs, into
// DIR/<phase>.pprof, to see where its CPU per operation goes
// (go tool pprof -top bin/muster-server DIR/create.pprof). The returned
// func waits for it.
func (tg *benchTarget) profile(t *testing.T, what string) func() {
	dir := os.Getenv("MUSTER_BENCH_PEER_PROFILE")
	if dir == "" || tg.name != "Muster" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := tg.cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "3").DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(what, " ", "-")+".pprof"), raw, 0o644)
		}
		if err != nil {
			t.Logf("profiling %s: %v", what, err)
		}
	}()
	return func() { <-done }
}

// latency records the median of three runs of op, in milliseconds.
func (tg *benchTarget) latency(t *testing.T, what string, op func() error) {
	t.Helper()
	var runs []time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		if err := op(); err != nil {
			t.Fatalf("%s: %s: %v", tg.name, what, err)
		}
		runs = append(runs, time.Since(start))
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
	tg.set(what, float64(runs[1].Microseconds())/1000)
}

// watch opens n watches on all machines from the current resource version,
// records how long opening them took and the memory each holds on the
// server, then writes one machine's status rounds times, one write at a
// time, and records how long each write took to reach every watch.
func (tg *benchTarget) watch(t *testing.T, ctx context.Context, n, clients, rounds int) {
	t.Helper()
	machines := tg.cs.MusterV1alpha1().Machines()
	l, err := machines.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatalf("%s: %v", tg.name, err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	type sample struct {
		round int
		lat   time.Duration
	}
	samples := make(chan sample, n*rounds)
	rss0 := tg.rssKiB()
	var mu sync.Mutex
	opened := 0
	tg.rate(t, "watch open", n, clients, func(int) error {
		w, err := machines.Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		if err != nil {
			return err
		}
		mu.Lock()
		opened++
		mu.Unlock()
		go func() {
			defer w.Stop()
			seen := -1
			for ev := range w.ResultChan() {
				m, ok := ev.Object.(*v1alpha1.Machine)
				if !ok {
					continue
				}
				// agentVersion carries the round and when it was written;
				// a later write of the same round (muster's controllers)
				// is not counted twice.
				f := strings.Split(m.Status.AgentVersion, "-")
				if len(f) != 3 || f[0] != "t" {
					continue
				}
				round, _ := strconv.Atoi(f[1])
				sent, _ := strconv.ParseInt(f[2], 10, 64)
				if round > seen {
					seen = round
					samples <- sample{round, time.Since(time.Unix(0, sent))}
				}
			}
		}()
		return nil
	})
	tg.set(fmt.Sprintf("RSS with %d watches, MiB", n), float64(tg.rssKiB())/1024)
	tg.set("RSS per open watch, KiB", float64(tg.rssKiB()-rss0)/float64(n))

	cpu0 := tg.cpu()
	var lats []time.Duration
	for r := 0; r < rounds; r++ {
		patch := fmt.Sprintf(`{"status":{"agentVersion":"t-%d-%d"}}`, r, time.Now().UnixNano())
		if _, err := machines.Patch(ctx, "bench-00000", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("%s: %v", tg.name, err)
		}
		// Every watch must see this round before the next is written.
		timeout := time.After(2 * time.Minute)
		for got := 0; got < n; {
			select {
			case s := <-samples:
				if s.round == r {
					got++
					lats = append(lats, s.lat)
				}
			case <-timeout:
				t.Fatalf("%s: round %d reached %d of %d watches in 2m", tg.name, r, got, opened)
			}
		}
	}
	tg.set("server CPU µs per event delivered", (tg.cpu()-cpu0)*1e6/float64(n*rounds))
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	tg.set("watch event latency p50, ms", float64(lats[len(lats)/2].Microseconds())/1000)
	tg.set("watch event latency p99, ms", float64(lats[len(lats)*99/100].Microseconds())/1000)
}

// applyCRDs creates the Muster kinds' CRDs on the peer and waits until
// each is Established and its machines resource answers a list.
func applyCRDs(t *testing.T, cfg *rest.Config) {
	t.Helper()
	crds, err := manifests.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, crd := range crds {
		if _, err := dyn.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: crd}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the peer refuses a generated CRD: %v", err)
		}
	}
	for _, crd := range crds {
		name := crd["metadata"].(map[string]interface{})["name"].(string)
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				c, _ := c.(map[string]interface{})
				if c["type"] == "Established" && c["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("CRD %s not Established: %v", name, err)
		}
	}
	cs := clientset.NewForConfigOrDie(cfg)
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the peer does not serve machines: %v", err)
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func figure(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

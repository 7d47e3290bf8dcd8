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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// The benchmarks below measure whole-server figures with real processes:
// `make bench` runs them once each (-benchtime=1x) and prints the figures as
// custom metrics. They assert nothing about speed.

// BenchmarkColdStart: process start to /readyz 200, on an empty SQLite
// database and on one holding 10,000 objects; and the RSS once idle.
func BenchmarkColdStart(b *testing.B) {
	for _, objects := range []int{0, 10000} {
		b.Run(fmt.Sprintf("sqlite-%d-objects", objects), func(b *testing.B) {
			s := startServer(b, "")
			if objects > 0 {
				createMachines(b, s, objects, 16)
			}
			var total time.Duration
			for i := 0; i < b.N; i++ {
				s.stop()
				start := time.Now()
				s.launch()
				if err := s.waitReady(5 * time.Minute); err != nil {
					b.Fatalf("not ready: %v\n%s", err, s.log.String())
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-ready")
			time.Sleep(5 * time.Second)
			b.ReportMetric(float64(rssKiB(s.cmd.Process.Pid))/1024, "MiB-RSS-idle")
		})
	}
}

// BenchmarkKubectlApply1000: `kubectl apply -f` of one file holding 1,000 Machines.
func BenchmarkKubectlApply1000(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			manifest := filepath.Join(b.TempDir(), "machines.yaml")
			var sb strings.Builder
			for i := 0; i < 1000; i++ {
				fmt.Fprintf(&sb, "---\napiVersion: muster.io/v1alpha1\nkind: Machine\nmetadata:\n  name: bench-%04d\nspec:\n  cluster: bench\n  roles: [worker]\n", i)
			}
			if err := os.WriteFile(manifest, []byte(sb.String()), 0o644); err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			for i := 0; i < b.N; i++ {
				s := startServer(b, be.endpoint(b))
				start := time.Now()
				if out, err := s.kubectl("apply", "-f", manifest); err != nil {
					b.Fatalf("kubectl apply: %v\n%s", err, out)
				}
				total += time.Since(start)
				s.stop()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/1000-objects")
		})
	}
}

// createMachines fills the datastore through the typed clientset.
func createMachines(b *testing.B, s *server, n, workers int) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	cs := clientset.NewForConfigOrDie(cfg)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%05d", i)}, Spec: v1alpha1.MachineSpec{Cluster: "fill"}}
				if _, err := cs.MusterV1alpha1().Machines().Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkJoin: agent process start → "running as machine" (CA fetch and
// pin, registration, grant, certificate stored), for 1 and for 50 agents
// started at once, on each backend; p50 and p99 over the agents.
func BenchmarkJoin(b *testing.B) {
	for _, be := range backends {
		for _, n := range []int{1, 50} {
			b.Run(fmt.Sprintf("%s-%d-agents", be.name, n), func(b *testing.B) {
				var all []time.Duration
				for i := 0; i < b.N; i++ {
					s := startServer(b, be.endpoint(b))
					token := strings.TrimSpace(mustRun(b, serverBin, "token", "create", "--data-dir", s.dataDir))
					var mu sync.Mutex
					var wg sync.WaitGroup
					for j := 0; j < n; j++ {
						wg.Add(1)
						go func(j int) {
							defer wg.Done()
							start := time.Now()
							a := startAgent(b, s, b.TempDir(), "--token", token, "--node-name", fmt.Sprintf("bench-%d-%d", i, j))
							a.waitOutput("running as machine", 2*time.Minute)
							mu.Lock()
							all = append(all, time.Since(start))
							mu.Unlock()
							a.kill()
						}(j)
					}
					wg.Wait()
					s.stop()
				}
				sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
				b.ReportMetric(float64(all[len(all)/2].Milliseconds()), "p50-ms")
				b.ReportMetric(float64(all[(len(all)*99)/100].Milliseconds()), "p99-ms")
			})
		}
	}
}

// BenchmarkPlanLatency: a plan change written by an admin → the agent
// reported it succeeded (status.appliedChecksum == status.checksum), one
// joined agent, 20 changes in a row, on each backend.
func BenchmarkPlanLatency(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				s := startServer(b, be.endpoint(b))
				token := strings.TrimSpace(mustRun(b, serverBin, "token", "create", "--data-dir", s.dataDir))
				a := startAgent(b, s, b.TempDir(), "--token", token, "--node-name", "latency")
				a.waitOutput("running as machine", time.Minute)
				cs := adminClient(b, s)
				plans := cs.MusterV1alpha1().MachinePlans()
				ctx := context.Background()
				for k := 0; k < 20; k++ {
					p, err := plans.Get(ctx, "latency", metav1.GetOptions{})
					if err != nil {
						b.Fatal(err)
					}
					p.Spec.Instructions = []v1alpha1.PlanInstruction{{Name: "n", Command: "/bin/true", Args: []string{fmt.Sprint(k)}}}
					start := time.Now()
					p, err = plans.Update(ctx, p, metav1.UpdateOptions{})
					if err != nil {
						b.Fatal(err)
					}
					want := p.Status.Checksum
					for {
						got, err := plans.Get(ctx, "latency", metav1.GetOptions{})
						if err == nil && got.Status.Checksum == want && got.Status.AppliedChecksum == want && got.Status.State == v1alpha1.PlanStateSucceeded {
							break
						}
						if time.Since(start) > time.Minute {
							b.Fatalf("plan %d not applied within a minute", k)
						}
						time.Sleep(5 * time.Millisecond)
					}
					lat = append(lat, time.Since(start))
				}
				a.kill()
				s.stop()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkIdleWrites: datastore writes while 5 joined, Running agents sit
// idle for 60 s: all of them (kine revisions), and those to the agents'
// own objects (their Machines and MachinePlans), per agent per hour. The
// rest are the server's own: its ServerEndpoint renewal (every 5 s) and
// its controller lease renewal (every 2 s), however many agents there are.
func BenchmarkIdleWrites(b *testing.B) {
	for i := 0; i < b.N; i++ {
		s := startServer(b, "")
		token := strings.TrimSpace(mustRun(b, serverBin, "token", "create", "--data-dir", s.dataDir))
		const agents = 5
		for j := 0; j < agents; j++ {
			a := startAgent(b, s, b.TempDir(), "--token", token, "--node-name", fmt.Sprintf("idle-%d", j))
			a.waitOutput("running as machine", time.Minute)
		}
		cs := adminClient(b, s)
		time.Sleep(10 * time.Second) // let joins settle into Running
		revision := func() string {
			l, err := cs.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return l.ResourceVersion
		}
		const window = 60 * time.Second
		r0 := revision()
		ctx, cancel := context.WithTimeout(context.Background(), window)
		var own atomic.Int64
		for _, w := range []func(context.Context, metav1.ListOptions) (watch.Interface, error){
			cs.MusterV1alpha1().Machines().Watch, cs.MusterV1alpha1().MachinePlans().Watch,
		} {
			wi, err := w(ctx, metav1.ListOptions{ResourceVersion: r0})
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				for range wi.ResultChan() {
					own.Add(1)
				}
			}()
		}
		<-ctx.Done()
		cancel()
		n0, _ := strconv.ParseInt(r0, 10, 64)
		n1, _ := strconv.ParseInt(revision(), 10, 64)
		b.ReportMetric(float64(n1-n0), "writes-in-60s")
		b.ReportMetric(float64(own.Load()), "agent-object-writes-in-60s")
		b.ReportMetric(float64(own.Load())/agents*float64(time.Hour/window), "writes/agent/hour")
		s.stop()
	}
}

// Package bench is `make bench`: registration storm, restart storm, plan
// fan-out and latency, and an idle fleet, against a fresh muster-server on
// SQLite and then PostgreSQL, each beside the raw datastore ceiling measured
// in the same run. It prints one table and writes it as JSON and Markdown
// under bench/out/.
//
// Scale comes from MUSTER_BENCH_SCALE: "smoke" (the default, what `make
// test` runs: it checks that the harness works and asserts nothing about
// speed) or "full" (the sizes; `make bench`). MUSTER_BENCH_AGENTS
// and MUSTER_BENCH_IDLE override the fleet size and the idle window;
// MUSTER_BENCH_BACKENDS=sqlite (or postgres) runs one backend only;
// naming sqlite+aesgcm (or postgres+aesgcm) there also runs the scenarios,
// in the same run, against a server that encrypts MachinePlans and
// MachinePlanSets at rest (--encryption-provider-config, docs/encryption.md):
// the cost of encryption beside the figures without it.
package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"github.com/muster-io/muster/internal/simulate"
	"github.com/muster-io/muster/internal/store"
	"github.com/muster-io/muster/internal/testenv/pgtest"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

type scale struct {
	Name                  string
	Agents, Concurrency   int
	FanOut, SinglePlans   int
	Idle, CeilingDuration time.Duration
}

func chooseScale() scale {
	s := scale{Name: "smoke", Agents: 20, Concurrency: 10, FanOut: 20, SinglePlans: 5, Idle: 5 * time.Second, CeilingDuration: time.Second}
	if os.Getenv("MUSTER_BENCH_SCALE") == "full" {
		s = scale{Name: "full", Agents: 5000, Concurrency: 200, FanOut: 1000, SinglePlans: 50, Idle: 5 * time.Minute, CeilingDuration: 5 * time.Second}
	}
	if n, err := strconv.Atoi(os.Getenv("MUSTER_BENCH_AGENTS")); err == nil && n > 0 {
		s.Agents, s.FanOut = n, min(s.FanOut, n)
		s.Name += fmt.Sprintf(" (%d agents)", n)
	}
	if d, err := time.ParseDuration(os.Getenv("MUSTER_BENCH_IDLE")); err == nil {
		s.Idle = d
	}
	s.FanOut = min(s.FanOut, s.Agents)
	return s
}

// figure is one row of the table.
type figure struct {
	Name   string             `json:"name"`
	Unit   string             `json:"unit"`
	Values map[string]float64 `json:"values"`
	// PerCeiling marks throughputs, shown with their ratio to the datastore ceiling.
	PerCeiling bool   `json:"perCeiling,omitempty"`
	Target     string `json:"target,omitempty"`
}

type report struct {
	Scale   scale     `json:"scale"`
	Machine string    `json:"machine"`
	When    time.Time `json:"when"`
	Figures []*figure `json:"figures"`
}

func (r *report) set(name, unit, target string, perCeiling bool, backend string, v float64) {
	for _, f := range r.Figures {
		if f.Name == name {
			f.Values[backend] = v
			return
		}
	}
	r.Figures = append(r.Figures, &figure{Name: name, Unit: unit, Target: target, PerCeiling: perCeiling, Values: map[string]float64{backend: v}})
}

const ceilingName = "datastore ceiling: create-if-absent txn/s (etcd client → kine)"

func TestBench(t *testing.T) {
	bin := os.Getenv("MUSTER_SERVER_BIN")
	if bin == "" {
		t.Fatal("MUSTER_SERVER_BIN is not set: run through `make test` or `make bench`, which build bin/muster-server")
	}
	sc := chooseScale()
	r := &report{Scale: sc, Machine: machine(), When: time.Now().UTC()}
	backends := []struct {
		name string
		dsn  func(t *testing.T) string
		// encrypted and audited variants run only when
		// MUSTER_BENCH_BACKENDS names them (MUSTER_BENCH_BACKENDS=sqlite,sqlite+audit
		// measures the audit's cost in one run).
		encrypted, audited bool
	}{
		{"sqlite", func(*testing.T) string { return "" }, false, false},
		{"sqlite+aesgcm", func(*testing.T) string { return "" }, true, false},
		{"sqlite+audit", func(*testing.T) string { return "" }, false, true},
		{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }, false, false},
		{"postgres+aesgcm", func(t *testing.T) string { return pgtest.DSN(t) }, true, false},
		{"postgres+audit", func(t *testing.T) string { return pgtest.DSN(t) }, false, true},
	}
	only := os.Getenv("MUSTER_BENCH_BACKENDS")
	for _, b := range backends {
		if (only != "" || b.encrypted || b.audited) && !slices.Contains(strings.Split(only, ","), b.name) {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			var extra []string
			switch {
			case b.encrypted:
				extra = []string{"--encryption-provider-config", encryptionConfig(t)}
			case b.audited:
				// The default policy, to a rotated log: what an operator
				// who turns the audit on with one flag gets.
				extra = []string{"--audit-log-path", filepath.Join(t.TempDir(), "audit.log")}
			default:
				r.set(ceilingName, "txn/s", "", false, b.name, ceiling(t, b.dsn(t), sc.CeilingDuration))
			}
			runScenarios(t, r, sc, bin, b.name, b.dsn(t), extra...)
		})
	}
	table := r.markdown()
	fmt.Println(table)
	out := filepath.Join("..", "..", "bench", "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	js, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "bench.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "bench.md"), []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ceiling is the raw rate of create-if-absent transactions through an etcd
// client on kine, on a fresh datastore of the same kind: what any write
// path of the server sits on.
func ceiling(t *testing.T, dsn string, d time.Duration) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds, err := store.Open(ctx, store.Config{DataDir: t.TempDir(), Endpoint: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	c, err := ds.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	end := time.Now().Add(d)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; time.Now().Before(end); i++ {
				key := fmt.Sprintf("/bench/%d/%d", w, i)
				resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, "x")).Commit()
				if err == nil && resp.Succeeded {
					n++
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(total) / d.Seconds()
}

// encryptionConfig is docs/encryption.md's file with one fresh aesgcm key.
func encryptionConfig(t *testing.T) string {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "encryption.yaml")
	body := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [machineplans.muster.io, machineplansets.muster.io]\n    providers:\n      - aesgcm:\n          keys:\n            - name: bench\n              secret: " + base64.StdEncoding.EncodeToString(key) + "\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func runScenarios(t *testing.T, r *report, sc scale, bin, backend, dsn string, extra ...string) {
	s := startServer(t, bin, dsn, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := s.admin(t)
	if _, err := admin.MusterV1alpha1().Clusters().Create(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--data-dir", s.dir, "token", "create", "--cluster", "bench").CombinedOutput()
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fleet, err := simulate.New(ctx, simulate.Config{Server: s.url, Token: lines[len(lines)-1], Count: sc.Agents, Concurrency: sc.Concurrency, Prefix: "bench"})
	if err != nil {
		t.Fatal(err)
	}

	// 1. Registration storm.
	cpu0, t0 := s.cpu(), time.Now()
	if err := fleet.Join(ctx, nil); err != nil {
		t.Fatalf("registration storm: %v", err)
	}
	wall := time.Since(t0)
	lat := fleet.JoinLatencies()
	r.set("registration storm: registrations/s", "/s", "≥ 250 SQLite, ≥ 150 PostgreSQL", true, backend, float64(sc.Agents)/wall.Seconds())
	r.set("registration storm: join p50", "ms", "", false, backend, ms(pct(lat, 50)))
	r.set("registration storm: join p99", "ms", "≤ 2,000", false, backend, ms(pct(lat, 99)))
	r.set("registration storm: server CPU", "cores", "", false, backend, (s.cpu()-cpu0)/wall.Seconds())
	waitRunning(t, admin, sc.Agents, 10*time.Minute)
	r.set("registration storm: server peak RSS", "MiB", "", false, backend, s.peakRSSMiB())

	// 2. Restart storm: every agent drops its connection and comes back at
	// once with its certificate.
	fleet.StopAll()
	t0 = time.Now()
	fleet.StartAll(ctx)
	for fleet.Connected() < sc.Agents {
		if time.Since(t0) > 10*time.Minute {
			t.Fatalf("restart storm: %d of %d agents connected after 10 min", fleet.Connected(), sc.Agents)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitRunning(t, admin, sc.Agents, 10*time.Minute)
	r.set("restart storm: all agents connected and Running", "s", "≤ 30", false, backend, time.Since(t0).Seconds())

	// 3. Plan fan-out, then single plan changes.
	names := make([]string, 0, sc.FanOut)
	for _, a := range fleet.Agents()[:sc.FanOut] {
		names = append(names, a.Name)
	}
	took := planRound(t, admin, names, "fan-out")
	r.set(fmt.Sprintf("plan fan-out to %d machines: all reported succeeded", sc.FanOut), "s", "", false, backend, took.Seconds())
	var singles []time.Duration
	for i := 0; i < sc.SinglePlans; i++ {
		singles = append(singles, planRound(t, admin, names[i%len(names):i%len(names)+1], fmt.Sprintf("single-%d", i)))
	}
	slices.Sort(singles)
	r.set("single plan change → reported: p50", "ms", "", false, backend, ms(pct(singles, 50)))
	r.set("single plan change → reported: p99", "ms", "≤ 250", false, backend, ms(pct(singles, 99)))

	// 4. Idle fleet.
	rev0, cpu0, t0 := s.revision(t), s.cpu(), time.Now()
	time.Sleep(sc.Idle)
	idle := time.Since(t0)
	r.set(fmt.Sprintf("idle fleet (%s): datastore writes/s", sc.Idle), "/s", "≤ 50", true, backend, float64(s.revision(t)-rev0)/idle.Seconds())
	r.set("idle fleet: server CPU", "cores", "", false, backend, (s.cpu()-cpu0)/idle.Seconds())
	r.set("idle fleet: server RSS", "MiB", "≤ 1,024", false, backend, s.rssMiB())
	if fleet.Connected() != sc.Agents {
		t.Errorf("idle fleet: %d of %d agents connected", fleet.Connected(), sc.Agents)
	}
	fleet.StopAll()
}

// planRound gives each machine a new plan and returns the time until every
// one reports it succeeded.
func planRound(t *testing.T, c clientset.Interface, names []string, tag string) time.Duration {
	ctx := context.Background()
	plans := c.MusterV1alpha1().MachinePlans()
	list, err := plans.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The updates below come first and the events are read after them, so
	// at full scale the server ends this watcher as too slow (its buffer
	// fills): the retry watcher resumes from the last event it delivered,
	// as an informer would, and nothing is missed.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return plans.Watch(ctx, o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	want := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for i := 0; i < min(50, len(names)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					p, err := plans.Get(ctx, n, metav1.GetOptions{})
					if err != nil {
						return err
					}
					p.Spec.Instructions = []api.PlanInstruction{{Name: "bench", Command: "/bin/true", Args: []string{tag}}}
					p, err = plans.Update(ctx, p, metav1.UpdateOptions{})
					if err == nil {
						mu.Lock()
						want[n] = p.Status.Checksum
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					t.Errorf("updating plan %s: %v", n, err)
				}
			}
		}()
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	wg.Wait()
	done := map[string]bool{}
	timeout := time.After(10 * time.Minute)
	for len(done) < len(names) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("plan watch closed")
			}
			if ev.Type == watch.Error {
				t.Fatalf("plan watch ended: %v", apierrors.FromObject(ev.Object))
			}
			p, isPlan := ev.Object.(*api.MachinePlan)
			if !isPlan || ev.Type != watch.Modified {
				continue
			}
			mu.Lock()
			sum, mine := want[p.Name]
			mu.Unlock()
			if mine && sum != "" && p.Status.AppliedChecksum == sum && p.Status.State == api.PlanStateSucceeded {
				done[p.Name] = true
			}
		case <-timeout:
			t.Fatalf("%s: %d of %d plans reported within 10 min", tag, len(done), len(names))
		}
	}
	return time.Since(start)
}

func waitRunning(t *testing.T, c clientset.Interface, n int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		list, err := c.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
		phases := map[api.MachinePhase]int{}
		if err == nil {
			for _, m := range list.Items {
				phases[m.Status.Phase]++
			}
		}
		if phases[api.MachinePhaseRunning] >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d machines Running after %s; machines by phase: %v", phases[api.MachinePhaseRunning], n, timeout, phases)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// server is one muster-server process under test.
type server struct {
	dir, url string
	cmd      *exec.Cmd
}

func startServer(t *testing.T, bin, dsn string, extra ...string) *server {
	// The server's data dir is its own (it refuses a shared one that others
	// may read); its log goes beside it.
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	port := freePort(t)
	args := []string{"--data-dir", dir, "--https-port", strconv.Itoa(port), "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1"}
	if dsn != "" {
		args = append(args, "--datastore-endpoint", dsn)
	}
	args = append(args, extra...)
	s := &server{dir: dir, url: fmt.Sprintf("https://127.0.0.1:%d", port), cmd: exec.Command(bin, args...)}
	logf, err := os.Create(filepath.Join(parent, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		logf.Close()
	})
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness only
	for deadline := time.Now().Add(90 * time.Second); ; {
		resp, err := hc.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("muster-server not ready:\n%s", log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *server) admin(t *testing.T) clientset.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(s.dir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 2000, 2000
	return clientset.NewForConfigOrDie(cfg)
}

// revision is the datastore's revision: it grows by one per write.
func (s *server) revision(t *testing.T) int64 {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + filepath.Join(s.dir, "kine.sock")}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(context.Background(), "/registry/health")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// cpu is the server's CPU time so far, in seconds.
func (s *server) cpu() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

func (s *server) rssMiB() float64     { return s.status("VmRSS:") }
func (s *server) peakRSSMiB() float64 { return s.status("VmHWM:") }

func (s *server) status(field string) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# muster bench (%s scale, %s, %s)\n\n", r.Scale.Name, r.Machine, r.When.Format(time.RFC3339))
	columns := []string{"sqlite", "postgres"}
	b.WriteString("| figure | SQLite | ÷ ceiling | PostgreSQL | ÷ ceiling |")
	for _, be := range []string{"sqlite+aesgcm", "sqlite+audit", "postgres+aesgcm", "postgres+audit"} {
		for _, f := range r.Figures {
			if _, ok := f.Values[be]; ok {
				columns = append(columns, be)
				fmt.Fprintf(&b, " %s | ÷ ceiling |", be)
				break
			}
		}
	}
	b.WriteString(" target |\n|---|" + strings.Repeat("---:|", 2*len(columns)) + "---|\n")
	var ceil map[string]float64
	for _, f := range r.Figures {
		if f.Name == ceilingName {
			ceil = f.Values
		}
	}
	for _, f := range r.Figures {
		fmt.Fprintf(&b, "| %s (%s) |", f.Name, f.Unit)
		for _, be := range columns {
			v, ok := f.Values[be]
			// A variant (encrypted, audited) sits on its backend's ceiling.
			base, _, _ := strings.Cut(be, "+")
			switch {
			case !ok:
				b.WriteString(" — | — |")
			case f.PerCeiling && ceil[base] > 0:
				fmt.Fprintf(&b, " %s | %.3f |", num(v), v/ceil[base])
			default:
				fmt.Fprintf(&b, " %s | |", num(v))
			}
		}
		fmt.Fprintf(&b, " %s |\n", f.Target)
	}
	return b.String()
}

func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				model = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%d vCPU %s, server and simulator on one machine", runtime.NumCPU(), model)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

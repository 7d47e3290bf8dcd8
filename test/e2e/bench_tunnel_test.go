package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// metricValue is an unlabelled series' value from s's /metrics.
func metricValue(b testing.TB, s *server, name string) float64 {
	_, body := adminRequest(b, s, http.MethodGet, "/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}

func benchAgents() int {
	if n, err := strconv.Atoi(os.Getenv("MUSTER_BENCH_TUNNEL_AGENTS")); err == nil && n > 0 {
		return n
	}
	return 200
}

// BenchmarkTunnelIdle: what idle tunnels cost. `muster-agent simulate`
// joins N agents (MUSTER_BENCH_TUNNEL_AGENTS, default 200) with and
// without their tunnels (the real agent's tunnel code); once all are
// connected (and every tunnel open), the server's and the simulator's
// RSS, the server's goroutines and both processes' CPU over 20 idle
// seconds, then the server's goroutine stacks and live heap. The
// difference of the two runs, divided by N, is the cost of one idle
// tunnel.
func BenchmarkTunnelIdle(b *testing.B) {
	n := benchAgents()
	for _, tunnels := range []bool{false, true} {
		b.Run(fmt.Sprintf("tunnels=%v", tunnels), func(b *testing.B) {
			for range b.N {
				s := startServer(b, "")
				token := strings.TrimSpace(mustRun(b, serverBin, "token", "create", "--data-dir", s.dataDir))
				args := []string{"simulate", "--server", s.url(), "--token", token, "--count", fmt.Sprint(n), "--concurrency", "50"}
				if !tunnels {
					args = append(args, "--no-tunnels")
				}
				sim := runAgentBinary(b, args...)
				sim.waitOutput(fmt.Sprintf("simulate: joined %d/%d", n, n), 5*time.Minute)
				if tunnels {
					waitFor(b, 2*time.Minute, "every tunnel open", func() bool { return metricValue(b, s, "muster_tunnels_open") == float64(n) })
				}
				// Let the joins' garbage be collected and the fleet settle.
				time.Sleep(10 * time.Second)
				cpuS, cpuA := cpuSeconds(s.cmd.Process.Pid), cpuSeconds(sim.cmd.Process.Pid)
				const window = 20 * time.Second
				time.Sleep(window)
				b.ReportMetric((cpuSeconds(s.cmd.Process.Pid)-cpuS)/window.Seconds()*1000, "server-cpu-ms/s")
				b.ReportMetric((cpuSeconds(sim.cmd.Process.Pid)-cpuA)/window.Seconds()*1000, "sim-cpu-ms/s")
				b.ReportMetric(float64(rssKiB(s.cmd.Process.Pid))/1024, "server-MiB-RSS")
				b.ReportMetric(float64(rssKiB(sim.cmd.Process.Pid))/1024, "sim-MiB-RSS")
				b.ReportMetric(metricValue(b, s, "go_goroutines"), "server-goroutines")
				// Where the memory goes, without the collector's headroom:
				// goroutine stacks and the heap live right after a collection
				// (the profile's gc=1 forces one), read last as it moves RSS.
				adminRequest(b, s, http.MethodGet, "/debug/pprof/heap?gc=1")
				b.ReportMetric(metricValue(b, s, "go_memstats_stack_inuse_bytes")/(1<<20), "server-MiB-stacks")
				b.ReportMetric(metricValue(b, s, "go_memstats_heap_alloc_bytes")/(1<<20), "server-MiB-live-heap")
				sim.kill()
				s.stop()
			}
		})
	}
}

// BenchmarkTunnelExec: the round trip of `true` run on a real agent
// through the server and the tunnel, over one HTTP/2 connection (p50,
// p99 of 300), and of the whole `kubectl muster exec` command (p50 of 20,
// process starts included).
func BenchmarkTunnelExec(b *testing.B) {
	for range b.N {
		s := startServer(b, "")
		token := strings.TrimSpace(mustRun(b, serverBin, "token", "create", "--data-dir", s.dataDir))
		a := startAgent(b, s, b.TempDir(), "--token", token, "--node-name", "bench-exec")
		a.waitOutput("opened the tunnel to the server", time.Minute)
		cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
		if err != nil {
			b.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		var lat []time.Duration
		for range 300 {
			start := time.Now()
			resp, err := hc.Post(s.url()+"/apis/muster.io/v1alpha1/machines/bench-exec/exec?command=true", "", nil)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("exec: %s", resp.Status)
			}
			lat = append(lat, time.Since(start))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		var cli []time.Duration
		for range 20 {
			start := time.Now()
			cmd := exec.Command("kubectl", "muster", "exec", "machine/bench-exec", "--", "true")
			cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig(), "PATH="+pluginDir(b)+string(os.PathListSeparator)+os.Getenv("PATH"))
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("kubectl muster exec: %v\n%s", err, out)
			}
			cli = append(cli, time.Since(start))
		}
		sort.Slice(cli, func(i, j int) bool { return cli[i] < cli[j] })
		b.ReportMetric(float64(cli[len(cli)/2].Milliseconds()), "kubectl-p50-ms")
		a.kill()
		s.stop()
	}
}

// BenchmarkTunnelPortForward: one port-forward's throughput, 256 MiB
// downloaded from an HTTP server on the agent's loopback through
// `kubectl muster port-forward`, against the same download made directly.
func BenchmarkTunnelPortForward(b *testing.B) {
	const size = 256 << 20
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		_, _ = io.CopyN(w, zeros{}, size)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = web.Serve(l) }()
	defer web.Close()
	port := l.Addr().(*net.TCPAddr).Port
	download := func(addr string) float64 {
		start := time.Now()
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			b.Fatal(err)
		}
		got, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got != size {
			b.Fatalf("downloaded %d bytes, want %d", got, size)
		}
		return float64(size) / (1 << 20) / time.Since(start).Seconds()
	}
	for range b.N {
		s := startServer(b, "")
		token := strings.TrimSpace(mustRun(b, serverBin, "token", "create", "--data-dir", s.dataDir))
		a := startAgent(b, s, b.TempDir(), "--token", token, "--node-name", "bench-pf", "--allow-port", fmt.Sprint(port))
		a.waitOutput("opened the tunnel to the server", time.Minute)
		local := freePort(b)
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, "kubectl", "muster", "port-forward", "machine/bench-pf", fmt.Sprintf("%d:%d", local, port))
		cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig(), "PATH="+pluginDir(b)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		waitFor(b, 30*time.Second, "port-forward to listen", func() bool { return strings.Contains(out.String(), "Forwarding from") })
		b.ReportMetric(download(fmt.Sprintf("127.0.0.1:%d", local)), "tunnel-MiB/s")
		b.ReportMetric(download(l.Addr().String()), "direct-MiB/s")
		cancel()
		_ = cmd.Wait()
		a.kill()
		s.stop()
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

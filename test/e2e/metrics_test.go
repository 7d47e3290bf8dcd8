package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/internal/caller"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestMetricsWithPrometheus: a real Prometheus (Debian's 2.42) scrapes the
// real server over TLS with a metrics-reader client certificate; after 20
// joins, one registration an operator denied and one plan change, it has
// scraped the counts those made. promtool accepts the server's exposition
// and the alert rules in deploy/, which Prometheus itself loads, and every
// metric the rules and the dashboard name is in the exposition; the
// rules' own tests (deploy/prometheus/alerts_test.yml) pass.
func TestMetricsWithPrometheus(t *testing.T) {
	t.Parallel()
	prometheus, promtool := lookPath(t, "prometheus"), lookPath(t, "promtool")
	s := startServer(t, "")
	certFile, keyFile := metricsReaderCert(t, s)

	// The reader's certificate reads /metrics and nothing else.
	reader := certFileClient(t, s, certFile, keyFile)
	if code, _, _ := do(t, reader, s, http.MethodGet, "/apis/muster.io/v1alpha1/machines", nil, nil); code != http.StatusForbidden {
		t.Errorf("a metrics reader listing machines: %d, want 403", code)
	}

	promPort := freePort(t)
	promURL := fmt.Sprintf("http://127.0.0.1:%d", promPort)
	startPrometheus(t, prometheus, promPort, s, certFile, keyFile)
	waitFor(t, 60*time.Second, "Prometheus to scrape the server", func() bool {
		v, ok := promQuery(t, promURL, `up{job="muster"}`)
		return ok && v == 1
	})
	if v, ok := promQuery(t, promURL, `muster_controller_leader{lease="muster-controllers"}`); !ok || v != 1 {
		t.Errorf("controller leader gauge %v (scraped %v), want 1", v, ok)
	}

	// 20 joins with a join token that needs no approval.
	token := newToken(t, s)
	sim := runAgentBinary(t, "simulate", "--server", s.url(), "--token", token, "--count", "20", "--concurrency", "10")
	sim.waitOutput("simulate: joined 20/20", 90*time.Second)

	// One registration an operator denies.
	manual := newToken(t, s, "--manual-approval")
	d := startAgent(t, s, t.TempDir(), "--token", manual, "--node-name", "denied-1")
	d.waitOutput("to be approved: muster-server registration approve", 30*time.Second)
	s.muster(t, "registration", "deny", "denied-1", "--message", "unknown hardware")
	if out, code := d.waitExit(30 * time.Second); code == 0 || !strings.Contains(out, "denied") {
		t.Fatalf("denied agent: exit %d\n%s", code, out)
	}

	// One request with a join token the server does not know.
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool(), MinVersion: tls.VersionTLS12}}}
	if code, _, _ := do(t, anon, s, http.MethodGet, "/apis/muster.io/v1alpha1/clusterregistrations", nil,
		map[string]string{"Authorization": "Bearer abcdef.0123456789abcdef"}); code != http.StatusUnauthorized {
		t.Errorf("an unknown join token: %d, want 401", code)
	}

	// One plan change, once every machine is Running.
	c := adminClient(t, s)
	waitFor(t, 60*time.Second, "20 Running machines", func() bool {
		ms, err := c.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		n := 0
		for _, m := range ms.Items {
			if m.Status.Phase == api.MachinePhaseRunning {
				n++
			}
		}
		return n == 20
	})
	applyPlan(t, s, "sim-0", "  files:\n  - path: /etc/muster-metrics-test\n    content: \"changed\\n\"\n")
	waitFor(t, 60*time.Second, "sim-0 to apply its changed plan", func() bool {
		m, err := c.MusterV1alpha1().Machines().Get(context.Background(), "sim-0", metav1.GetOptions{})
		if err != nil || m.Status.Phase != api.MachinePhaseRunning {
			return false
		}
		n := len(m.Status.Transitions)
		return n > 0 && m.Status.Transitions[n-1].From == "Updating"
	})

	// What Prometheus scraped: the counts of exactly what happened.
	for _, tc := range []struct {
		query string
		want  float64
	}{
		{`muster_registrations_total{outcome="granted",reason="JoinToken"}`, 20},
		{`muster_registrations_total{outcome="pending",reason="AwaitingApproval"}`, 1},
		{`muster_registrations_total{outcome="denied",reason="DeniedByOperator"}`, 1},
		{`muster_join_duration_seconds_count`, 20},
		{`muster_join_token_uses_total`, 20},
		{`muster_join_token_failures_total{result="unknown"}`, 1},
		{`muster_join_token_failures_total{result="blocked"}`, 0},
		{`muster_transitions_total{kind="Machine",from="Pending",to="Registering"}`, 20},
		{`muster_transitions_total{kind="Machine",from="Registering",to="Bootstrapping"}`, 20},
		{`muster_transitions_total{kind="Machine",from="Bootstrapping",to="Running"}`, 20},
		{`muster_transitions_total{kind="Machine",from="Running",to="Updating"}`, 1},
		{`muster_transitions_total{kind="Machine",from="Updating",to="Running"}`, 1},
		{`muster_transitions_total{kind="ClusterRegistration",from="Pending",to="Denied"}`, 1},
		{`muster_plan_applications_total{outcome="applied"}`, 21},
		{`muster_plan_application_duration_seconds_count{outcome="applied"}`, 21},
		{`muster_plan_applications_total{outcome="failed"}`, 0},
		{`sum(muster_machines{phase="Running"})`, 20},
		{`sum(muster_machines)`, 20},
		{`muster_agents_connected`, 20},
		{`muster_controller_leader{lease="muster-controllers"}`, 1},
	} {
		var got float64
		var ok bool
		// Scraped every second; the last events need a scrape or two.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if got, ok = promQuery(t, promURL, tc.query); ok && got == tc.want {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !ok || got != tc.want {
			t.Errorf("Prometheus: %s = %v (found %v), want %v", tc.query, got, ok, tc.want)
		}
	}
	waitFor(t, 30*time.Second, "Prometheus to have scraped a heartbeat per agent", func() bool {
		v, ok := promQuery(t, promURL, `muster_heartbeats_total{result="accepted"}`)
		return ok && v >= 20
	})

	// The exposition, as the reader gets it.
	code, _, exposition := do(t, reader, s, http.MethodGet, "/metrics", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics as a metrics reader: %d", code)
	}
	checkExposition(t, promtool, exposition)
	for _, file := range []string{"prometheus/alerts.yml", "grafana/muster.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`\bmuster_[a-z0-9_]+`).FindAllString(string(b), -1) {
			if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).MatchString(exposition) {
				t.Errorf("deploy/%s names %s, which is not in the server's exposition", file, name)
			}
		}
	}
	if out, err := exec.Command(promtool, "check", "rules", filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	// The rules fire on the series the server exposes, as their tests say.
	rulesTest := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	rulesTest.Dir = filepath.Join("..", "..", "deploy", "prometheus")
	if out, err := rulesTest.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
	// Prometheus loaded the same rules.
	if rules := promGet(t, promURL, "/api/v1/rules"); !strings.Contains(rules, "MusterDatastoreUnreachable") {
		t.Errorf("Prometheus did not load deploy/prometheus/alerts.yml: %s", rules)
	}
}

// checkExposition runs promtool check metrics on the lines of Muster's
// own metrics, and on the whole exposition, where it must find nothing
// about a muster_ metric.
func checkExposition(t *testing.T, promtool, exposition string) {
	t.Helper()
	var own strings.Builder
	for _, line := range strings.SplitAfter(exposition, "\n") {
		if strings.HasPrefix(line, "muster_") || strings.HasPrefix(line, "# HELP muster_") || strings.HasPrefix(line, "# TYPE muster_") {
			own.WriteString(line)
		}
	}
	if !strings.Contains(own.String(), "# TYPE muster_registrations_total counter") {
		t.Fatalf("the exposition lacks Muster's metrics:\n%s", exposition)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(own.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on Muster's metrics: %v\n%s", err, out)
	}
	cmd = exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, _ := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "muster_") {
			t.Errorf("promtool check metrics: %s", line)
		}
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (Debian package prometheus; .ci/run installs it): %v", name, err)
	}
	return p
}

// metricsReaderCert mints Prometheus' client certificate, of group
// muster:metrics-readers, with muster-server kubeconfig --user --group, as
// an operator would, and returns its files.
func metricsReaderCert(t *testing.T, s *server) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	kubeconfigFile := filepath.Join(dir, "prometheus.kubeconfig")
	args := []string{"kubeconfig", "--data-dir", s.dataDir, "--user", "prometheus", "--group", caller.MetricsReadersGroup, "--output", kubeconfigFile}
	if out, err := exec.Command(serverBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("muster-server %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		t.Fatalf("%s carries no client certificate and key", kubeconfigFile)
	}
	certFile, keyFile = filepath.Join(dir, "prometheus.crt"), filepath.Join(dir, "prometheus.key")
	if err := os.WriteFile(certFile, cfg.CertData, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, cfg.KeyData, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func certFileClient(t *testing.T, s *server, certFile, keyFile string) *http.Client {
	t.Helper()
	dir := t.TempDir()
	for src, dst := range map[string]string{certFile: "client.crt", keyFile: "client.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certHTTPClient(t, s, dir)
}

// startPrometheus runs Prometheus on 127.0.0.1:port, scraping s every
// second over TLS with the given client certificate, with the alert rules
// of deploy/.
func startPrometheus(t *testing.T, bin string, port int, s *server, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: muster
    scheme: https
    tls_config:
      ca_file: %s
      cert_file: %s
      key_file: %s
    static_configs:
      - targets: ['%s:%d']
`, rules, filepath.Join(s.dataDir, "tls", "ca.crt"), certFile, keyFile, s.host, s.port)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("--- prometheus log ---\n%s", log.String())
		}
	})
}

func promGet(t *testing.T, base, path string) string {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

// promQuery evaluates an instant query whose result is one sample.
func promQuery(t *testing.T, base, query string) (float64, bool) {
	t.Helper()
	body := promGet(t, base, "/api/v1/query?query="+url.QueryEscape(query))
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]interface{} `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(body), &r) != nil || r.Status != "success" || len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// gather returns the legacy registry's families by name.
func gather(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// value is the value of the series of name with exactly labels, and whether it exists.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestRegistrationReasonsAreBounded(t *testing.T) {
	Register()
	for _, tc := range []struct {
		outcome, reason, label string
	}{
		{OutcomeGranted, ReasonJoinToken, ReasonJoinToken},
		{OutcomeRefused, "TokenUsedUp", "TokenUsedUp"},
		{OutcomeDenied, ReasonDeniedByOperator, ReasonDeniedByOperator},
		// A reason written through the API by whoever may update a
		// registration's status never becomes a label of its own.
		{OutcomeDenied, "attacker-chosen <script>", ReasonOther},
		{OutcomeDenied, strings.Repeat("x", 4096), ReasonOther},
	} {
		before, _ := value(gather(t), "muster_registrations_total", map[string]string{"outcome": tc.outcome, "reason": tc.label})
		Registration(tc.outcome, tc.reason)
		after, ok := value(gather(t), "muster_registrations_total", map[string]string{"outcome": tc.outcome, "reason": tc.label})
		if !ok || after != before+1 {
			t.Errorf("Registration(%q, %q): series reason=%q went %v -> %v (exists %v)", tc.outcome, tc.reason, tc.label, before, after, ok)
		}
	}
	for _, m := range gather(t)["muster_registrations_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" && strings.Contains(l.GetValue(), "attacker") {
				t.Errorf("an unlisted reason became a label: %q", l.GetValue())
			}
		}
	}
}

func TestTransitionStatesAreFSMNames(t *testing.T) {
	Register()
	for _, tc := range []struct {
		def              *fsm.Definition
		from, to         string
		wantFrom, wantTo string
	}{
		{fsm.Machine, "Running", "Updating", "Running", "Updating"},
		{fsm.Registration, "Pending", "Denied", "Pending", "Denied"},
		{fsm.Machine, "Running", "made-up", "Running", ReasonOther},
	} {
		labels := map[string]string{"kind": tc.def.Name(), "from": tc.wantFrom, "to": tc.wantTo}
		before, _ := value(gather(t), "muster_transitions_total", labels)
		Transition(tc.def, tc.from, tc.to)
		if after, _ := value(gather(t), "muster_transitions_total", labels); after != before+1 {
			t.Errorf("Transition(%s, %s, %s): %v -> %v", tc.def.Name(), tc.from, tc.to, before, after)
		}
	}
}

func TestBoundClusters(t *testing.T) {
	byCluster := func(sizes ...int) map[string]map[string]int {
		out := map[string]map[string]int{}
		for i, n := range sizes {
			out[fmt.Sprintf("c%02d", i)] = map[string]int{"Running": n}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		in    map[string]map[string]int
		max   int
		named []string
		other int
	}{
		{"under the bound", byCluster(3, 1), 2, []string{"c00", "c01"}, -1},
		{"largest kept, the rest summed", byCluster(1, 5, 2, 7), 2, []string{"c01", "c03"}, 3},
		{"ties by name", byCluster(2, 2, 2), 1, []string{"c00"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := boundClusters(tc.in, tc.max)
			var named []string
			for c := range out {
				if c != OtherClusters {
					named = append(named, c)
				}
			}
			sort.Strings(named)
			if fmt.Sprint(named) != fmt.Sprint(tc.named) {
				t.Errorf("named %v, want %v", named, tc.named)
			}
			other, ok := out[OtherClusters]
			if tc.other < 0 && ok {
				t.Errorf("an %s series under the bound", OtherClusters)
			}
			if tc.other >= 0 && other["Running"] != tc.other {
				t.Errorf("%s has %d, want %d", OtherClusters, other["Running"], tc.other)
			}
		})
	}
}

func TestFleetGauges(t *testing.T) {
	Register()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	add := func(name, cluster string, phase api.MachinePhase) {
		_ = idx.Add(&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.MachineSpec{Cluster: cluster}, Status: api.MachineStatus{Phase: phase}})
	}
	add("a", "east", api.MachinePhaseRunning)
	add("b", "east", api.MachinePhaseRunning)
	add("c", "east", api.MachinePhaseUnavailable)
	add("d", "west", api.MachinePhaseUpdating)
	add("e", "west", api.MachinePhaseRunning)
	for i := 0; i < MaxClusterSeries+5; i++ {
		add(fmt.Sprintf("own-%d", i), fmt.Sprintf("c-%03d", i), api.MachinePhaseRunning)
	}
	SetMachines(listers.NewMachineLister(idx))
	SetConnectedAgents(func() int { return 7 })
	fams := gather(t)
	for _, tc := range []struct {
		cluster, phase string
		want           float64
	}{
		{"east", "Running", 2}, {"east", "Unavailable", 1}, {"east", "Failed", 0}, {"west", "Updating", 1},
	} {
		if got, ok := value(fams, "muster_machines", map[string]string{"cluster": tc.cluster, "phase": tc.phase}); !ok || got != tc.want {
			t.Errorf("muster_machines{cluster=%q,phase=%q} = %v (exists %v), want %v", tc.cluster, tc.phase, got, ok, tc.want)
		}
	}
	clusters := map[string]bool{}
	total := 0.0
	for _, m := range fams["muster_machines"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cluster" {
				clusters[l.GetValue()] = true
			}
		}
		total += m.GetGauge().GetValue()
	}
	if len(clusters) != MaxClusterSeries+1 || !clusters[OtherClusters] {
		t.Errorf("%d cluster label values, want %d and %q", len(clusters), MaxClusterSeries+1, OtherClusters)
	}
	if total != float64(5+MaxClusterSeries+5) {
		t.Errorf("muster_machines sums to %v, want every machine counted once", total)
	}
	if got, _ := value(fams, "muster_agents_connected", nil); got != 7 {
		t.Errorf("muster_agents_connected = %v, want 7", got)
	}
}

// touchAll records one of everything, so that every metric has a series.
func touchAll() {
	Registration(OutcomeGranted, ReasonJoinToken)
	JoinGranted(time.Now())
	Transition(fsm.Machine, "Running", "Updating")
	PlanFinished(PlanApplied, time.Second)
	Heartbeat(HeartbeatAccepted)
	TokenUsed()
	TokenFailed(TokenUnknown)
	Leading("muster-controllers", true)
	DatastoreError("machines", "get")
	SnapshotUploaded()
	SnapshotUploadFailed()
	SetConnectedAgents(func() int { return 1 })
	SetTunnels(func() int { return 1 })
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: api.MachineSpec{Cluster: "c"}, Status: api.MachineStatus{Phase: api.MachinePhaseRunning}})
	SetMachines(listers.NewMachineLister(idx))
}

// metricName finds metric names in PromQL and in the dashboard's JSON.
var metricName = regexp.MustCompile(`\bmuster_[a-z0-9_]+`)

// TestDeployNamesExist: every metric the alert rules and the dashboard
// name is one the server exposes (its series' names, histograms' _bucket,
// _sum and _count included).
func TestDeployNamesExist(t *testing.T) {
	Register()
	touchAll()
	exposed := map[string]bool{}
	for name, f := range gather(t) {
		exposed[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exposed[name+s] = true
			}
		}
	}
	for _, file := range []string{"prometheus/alerts.yml", "grafana/muster.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", file))
		if err != nil {
			t.Fatal(err)
		}
		names := metricName.FindAllString(string(b), -1)
		if len(names) == 0 {
			t.Errorf("deploy/%s names no metric", file)
		}
		for _, n := range names {
			if !exposed[n] {
				t.Errorf("deploy/%s names %s, which the server does not expose", file, n)
			}
		}
	}
}

// TestNamingConventions: Prometheus' conventions for every Muster metric:
// the muster_ prefix, counters end in _total, durations in _seconds.
func TestNamingConventions(t *testing.T) {
	Register()
	touchAll()
	n := 0
	for name, f := range gather(t) {
		if !strings.HasPrefix(name, namespace+"_") {
			continue
		}
		n++
		if f.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
		isCounter := f.GetType() == dto.MetricType_COUNTER
		if isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: a %s; counters and only counters end in _total", name, f.GetType())
		}
		if strings.Contains(name, "duration") && !strings.HasSuffix(name, "_seconds") {
			t.Errorf("%s: a duration not in seconds", name)
		}
	}
	if n != 15 {
		t.Errorf("%d muster_ metrics exposed, want the 15 of docs/metrics.md", n)
	}
}

package metrics

import (
	"sort"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	compbase "k8s.io/component-base/metrics"

	"github.com/muster-io/muster/internal/fsm"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// MaxClusterSeries bounds the clusters muster_machines names: the largest
// clusters by machine count (then by name) get their own series, the rest
// are summed under OtherClusters. An agent joining with a token bound to no
// cluster gets a cluster of its own, so the number of clusters is the
// number of such agents, not a number an operator chose.
const MaxClusterSeries = 50

// OtherClusters is the cluster label of the machines of every cluster past
// MaxClusterSeries; no cluster can be named so (names are DNS labels).
const OtherClusters = "_other"

// ConnectedWindow is how recently an agent must have been heard by a server
// to count as connected to it: three heartbeats (every 5 s).
const ConnectedWindow = 15 * time.Second

var (
	machinesDesc = compbase.NewDesc(namespace+"_machines",
		"Machines by cluster and phase, from this server's cache at scrape time; every server of a deployment reports the whole fleet. Clusters past the largest 50 are summed under cluster=\"_other\".",
		[]string{"cluster", "phase"}, nil, compbase.ALPHA, "")
	connectedDesc = compbase.NewDesc(namespace+"_agents_connected",
		"Agents whose requests (heartbeats, watches, status writes) reached this server in the last 15 seconds.",
		nil, nil, compbase.ALPHA, "")
	tunnelsDesc = compbase.NewDesc(namespace+"_tunnels_open",
		"Agents' tunnels this server holds (kubectl muster exec, port-forward and logs reach a machine through its tunnel); with several servers, the others forward to it.",
		nil, nil, compbase.ALPHA, "")
)

// fleet computes the gauges that describe the fleet when Prometheus
// scrapes, from caches the server keeps anyway: nothing is counted on the
// hot paths for them.
type fleetCollector struct {
	compbase.BaseStableCollector
	machines  atomic.Pointer[listers.MachineLister]
	connected atomic.Pointer[func() int]
	tunnels   atomic.Pointer[func() int]
}

var fleet = &fleetCollector{}

// SetMachines gives muster_machines the server's Machine cache, once it
// has synced; until then the metric is absent rather than zero.
func SetMachines(l listers.MachineLister) { fleet.machines.Store(&l) }

// SetConnectedAgents gives muster_agents_connected its count: agents heard
// by this server within ConnectedWindow.
func SetConnectedAgents(count func() int) { fleet.connected.Store(&count) }

// SetTunnels gives muster_tunnels_open its count.
func SetTunnels(count func() int) { fleet.tunnels.Store(&count) }

func (c *fleetCollector) DescribeWithStability(ch chan<- *compbase.Desc) {
	ch <- machinesDesc
	ch <- connectedDesc
	ch <- tunnelsDesc
}

func (c *fleetCollector) CollectWithStability(ch chan<- compbase.Metric) {
	if count := c.connected.Load(); count != nil {
		ch <- compbase.NewLazyConstMetric(connectedDesc, compbase.GaugeValue, float64((*count)()))
	}
	if count := c.tunnels.Load(); count != nil {
		ch <- compbase.NewLazyConstMetric(tunnelsDesc, compbase.GaugeValue, float64((*count)()))
	}
	l := c.machines.Load()
	if l == nil {
		return
	}
	ms, err := (*l).List(labels.Everything())
	if err != nil {
		return
	}
	byCluster := map[string]map[string]int{}
	for _, m := range ms {
		phases := byCluster[m.Spec.Cluster]
		if phases == nil {
			phases = map[string]int{}
			byCluster[m.Spec.Cluster] = phases
		}
		phases[state(fsm.Machine, string(m.Status.Phase))]++
	}
	for cluster, phases := range boundClusters(byCluster, MaxClusterSeries) {
		// Every phase of a named cluster, zeros too, so that a series an
		// alert watches does not vanish when its count drops to zero.
		for _, p := range append(fsm.Machine.States(), ReasonOther) {
			n, ok := phases[p]
			if !ok && p == ReasonOther {
				continue
			}
			ch <- compbase.NewLazyConstMetric(machinesDesc, compbase.GaugeValue, float64(n), cluster, p)
		}
	}
}

// boundClusters keeps the max largest clusters (by machine count, then
// name) and sums the others under OtherClusters.
func boundClusters(byCluster map[string]map[string]int, max int) map[string]map[string]int {
	if len(byCluster) <= max {
		return byCluster
	}
	type sized struct {
		name string
		n    int
	}
	all := make([]sized, 0, len(byCluster))
	for name, phases := range byCluster {
		n := 0
		for _, c := range phases {
			n += c
		}
		all = append(all, sized{name, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].name < all[j].name
	})
	out := make(map[string]map[string]int, max+1)
	other := map[string]int{}
	for i, c := range all {
		if i < max {
			out[c.name] = byCluster[c.name]
			continue
		}
		for p, n := range byCluster[c.name] {
			other[p] += n
		}
	}
	out[OtherClusters] = other
	return out
}

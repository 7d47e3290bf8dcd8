package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestClusterStatusDeleting: Deleting may be written only on a deleted
// cluster, since no event leaves it.
func TestClusterStatusDeleting(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name    string
		deleted *metav1.Time
		from    api.ClusterPhase
		to      api.ClusterPhase
		refused bool
	}{
		{"Deleting on a live cluster", nil, api.ClusterPhaseActive, api.ClusterPhaseDeleting, true},
		{"Deleting on a deleted cluster", &now, api.ClusterPhaseActive, api.ClusterPhaseDeleting, false},
		{"still Deleting", nil, api.ClusterPhaseDeleting, api.ClusterPhaseDeleting, false},
		{"Active on a live cluster", nil, api.ClusterPhaseWaitCheckIn, api.ClusterPhaseActive, false},
	}
	for _, tt := range tests {
		old := &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", DeletionTimestamp: tt.deleted}, Status: api.ClusterStatus{Phase: tt.from}}
		c := old.DeepCopy()
		c.Status.Phase = tt.to
		errs := ValidateClusterStatusUpdate(c, old)
		if refused := len(errs) > 0; refused != tt.refused {
			t.Errorf("%s: errors %v, want refused=%v", tt.name, errs, tt.refused)
		}
		if tt.refused && !strings.Contains(errs.ToAggregate().Error(), "kubectl delete cluster prod") {
			t.Errorf("%s: the refusal does not say what to do: %v", tt.name, errs)
		}
	}
}

// TestClusterKubernetes: what the planner is asked to run is checked when
// the Cluster is written, each refusal naming the field and the fix.
func TestClusterKubernetes(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    api.ClusterKubernetes
		want string // "" = valid
	}{
		{"upstream", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"}, ""},
		{"with port and range", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", APIServerPort: 16443, ServiceCIDR: "10.96.0.0/12"}, ""},
		{"no distribution", api.ClusterKubernetes{Version: "v1.37.2"}, `spec.kubernetes.distribution: Required value: say which Kubernetes to run`},
		{"k3s not shipped", api.ClusterKubernetes{Distribution: "k3s", Version: "v1.37.2"}, `spec.kubernetes.distribution: Invalid value: "k3s": the k3s and RKE2 profiles are not shipped`},
		{"rke2 not shipped", api.ClusterKubernetes{Distribution: "rke2", Version: "v1.37.2"}, `spec.kubernetes.distribution: Invalid value: "rke2": the k3s and RKE2 profiles are not shipped`},
		{"another distribution", api.ClusterKubernetes{Distribution: "eks", Version: "v1.37.2"}, `spec.kubernetes.distribution: Unsupported value: "eks": supported values: "kubernetes"`},
		{"no version", api.ClusterKubernetes{Distribution: "kubernetes"}, `spec.kubernetes.version: Required value`},
		{"bad version", api.ClusterKubernetes{Distribution: "kubernetes", Version: "1.37"}, `spec.kubernetes.version: Invalid value: "1.37": a Kubernetes release version is "v" and three numbers`},
		{"bad port", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", APIServerPort: 70000}, `spec.kubernetes.apiServerPort: Invalid value: 70000`},
		{"bad range", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", ServiceCIDR: "10.96.0.1/12"}, `spec.kubernetes.serviceCIDR: Invalid value: "10.96.0.1/12"`},
		{"pinned binaries", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", Binaries: []api.KubernetesBinary{
			{Name: "kube-apiserver", URL: "https://dl.k8s.io/v1.37.2/bin/linux/amd64/kube-apiserver", Sha256: strings.Repeat("ab", 32)}}}, ""},
		{"binary over plain http", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", Binaries: []api.KubernetesBinary{
			{Name: "etcd", URL: "http://example.com/etcd", Sha256: strings.Repeat("ab", 32)}}}, `spec.kubernetes.binaries[0].url: Invalid value: "http://example.com/etcd": must be an https URL`},
		{"binary of an unknown name", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", Binaries: []api.KubernetesBinary{
			{Name: "kubelet2", URL: "https://example.com/k", Sha256: strings.Repeat("ab", 32)}}}, `spec.kubernetes.binaries[0].name: Unsupported value: "kubelet2"`},
		{"binary twice", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", Binaries: []api.KubernetesBinary{
			{Name: "etcd", URL: "https://example.com/a", Sha256: strings.Repeat("ab", 32)}, {Name: "etcd", URL: "https://example.com/b", Sha256: strings.Repeat("ab", 32)}}}, `spec.kubernetes.binaries[1].name: Duplicate value: "etcd"`},
		{"binary without a sum", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", Binaries: []api.KubernetesBinary{
			{Name: "etcd", URL: "https://example.com/etcd", Sha256: "abc"}}}, `spec.kubernetes.binaries[0].sha256: Invalid value: "abc": must be a SHA-256 as 64 hex digits`},
		{"a URL a shell would read", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", Binaries: []api.KubernetesBinary{
			{Name: "etcd", URL: "https://example.com/$(reboot)", Sha256: strings.Repeat("ab", 32)}}}, `must not hold quotes, '$'`},
		{"too many binaries", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", Binaries: make([]api.KubernetesBinary, 6)}, `spec.kubernetes.binaries: Too many: 6: must have at most 5 items`},
		{"upgrade strategy", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", UpgradeStrategy: &api.KubernetesUpgradeStrategy{ControlPlaneConcurrency: 1, WorkerConcurrency: 3, HealthTimeoutSeconds: 120}}, ""},
		{"negative worker concurrency", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", UpgradeStrategy: &api.KubernetesUpgradeStrategy{WorkerConcurrency: -1}}, `spec.kubernetes.upgradeStrategy.workerConcurrency: Invalid value: -1`},
		{"a health timeout no kube-apiserver meets", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", UpgradeStrategy: &api.KubernetesUpgradeStrategy{HealthTimeoutSeconds: 2}}, `give at least 10`},
		{"workers drained with a timeout", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", UpgradeStrategy: &api.KubernetesUpgradeStrategy{DrainWorkers: &api.WorkerDrainOptions{TimeoutSeconds: 60}}}, ""},
		{"a drain timeout no eviction meets", api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2", UpgradeStrategy: &api.KubernetesUpgradeStrategy{DrainWorkers: &api.WorkerDrainOptions{TimeoutSeconds: 5}}}, `spec.kubernetes.upgradeStrategy.drainWorkers.timeoutSeconds: Invalid value: 5: a drain waits for pods' grace periods: give 10 to 3600 seconds`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.k
			errs := ValidateCluster(&api.Cluster{Spec: api.ClusterSpec{Kubernetes: &k}})
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("errors %v; want one saying %q", errs, tc.want)
			}
		})
	}
}

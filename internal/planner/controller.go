package planner

import (
	"context"
	"crypto/x509"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/reconcile"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// Labels on the plans the planner writes.
const (
	// PlannerLabel marks a MachinePlan the planner wrote, with its
	// cluster's name: a plan without it was written by someone else and
	// is never touched.
	PlannerLabel = "muster.io/planner"
	// StageLabel is the stage the plan carries (etcd0, etcd1-apiserver,
	// worker, ...): a plan applied for one stage is not healthy for the next.
	StageLabel = "muster.io/planner-stage"
	// VersionLabel is the Kubernetes version the plan runs, and
	// VersionSinceAnnotation when the planner wrote it at that version: an
	// upgraded machine not healthy within the upgrade's timeout of it is
	// reverted.
	VersionLabel           = "muster.io/planner-version"
	VersionSinceAnnotation = "muster.io/planner-version-since"
	// RemovesAnnotation, on a member's plan, names the dead member that
	// plan removes from etcd: once the plan is applied, the member is out.
	RemovesAnnotation = "muster.io/planner-removes"
	// DrainsAnnotation and UncordonsAnnotation, on the first control-plane
	// machine's plan, list (comma-separated) the workers that plan drains
	// and uncordons for a version change: a worker is rewritten at the new
	// version once that plan drained it, and uncordoned once healthy at it.
	DrainsAnnotation    = "muster.io/planner-drains"
	UncordonsAnnotation = "muster.io/planner-uncordons"
)

// resync reconciles every cluster this often besides on every change.
const resync = 5 * time.Second

// Controller is the planner. Run it on the leader only.
type Controller struct {
	client   versioned.Interface
	clusters listers.ClusterLister
	machines listers.MachineLister
	plans    listers.MachinePlanLister
	bin      Binaries
	loop     *reconcile.Loop

	// pkis caches each cluster's PKI between its making and the first
	// plan that carries it (from which a new leader recovers it).
	mu   sync.Mutex
	pkis map[string]*clusterPKI
}

// NewController registers its informers with factory. bin says where
// plans find etcd, the Kubernetes components and kubectl on the machines.
func NewController(client versioned.Interface, factory informers.SharedInformerFactory, bin Binaries) *Controller {
	v := factory.Muster().V1alpha1()
	c := &Controller{client: client, clusters: v.Clusters().Lister(), machines: v.Machines().Lister(),
		plans: v.MachinePlans().Lister(), bin: bin, loop: reconcile.NewLoop(), pkis: map[string]*clusterPKI{}}
	_, _ = v.Clusters().Informer().AddEventHandler(c.loop.Handler())
	_, _ = v.Machines().Informer().AddEventHandler(c.loop.Handler())
	_, _ = v.MachinePlans().Informer().AddEventHandler(c.loop.Handler())
	return c
}

// Run plans until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.loop.Run(ctx, resync, func(ctx context.Context) {
		if err := c.reconcileAll(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Planning clusters' Kubernetes")
		}
	})
}

func (c *Controller) reconcileAll(ctx context.Context) error {
	clusters, err := c.clusters.List(labels.Everything())
	if err != nil {
		return err
	}
	machines, err := c.machines.List(labels.Everything())
	if err != nil {
		return err
	}
	plans, err := c.plans.List(labels.Everything())
	if err != nil {
		return err
	}
	planOf := map[string]*api.MachinePlan{}
	for _, p := range plans {
		planOf[p.Name] = p
	}
	var errs []string
	planned := map[string]bool{}
	for _, cl := range clusters {
		if cl.Spec.Kubernetes == nil || cl.DeletionTimestamp != nil {
			// The planner no longer plans this cluster: its machines'
			// deletion waits for no member to leave.
			for _, p := range plans {
				if p.Labels[PlannerLabel] == cl.Name {
					if err := c.release(ctx, p); err != nil {
						errs = append(errs, err.Error())
					}
				}
			}
			continue
		}
		planned[cl.Name] = true
		if err := c.reconcile(ctx, cl, machines, planOf); err != nil && ctx.Err() == nil {
			errs = append(errs, fmt.Sprintf("cluster %s: %v", cl.Name, err))
		}
	}
	// A deleted cluster's PKI is not kept in memory.
	c.mu.Lock()
	for name := range c.pkis {
		if !planned[name] {
			delete(c.pkis, name)
		}
	}
	c.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// agentGone reports whether a deleted machine's agent is gone: it was
// Unavailable (no server heard it for the silence threshold) when it was
// deleted, as a machine a pool replaces for its health is. Such a machine
// cannot run a drain plan, so the planner has another member remove its
// etcd member.
func agentGone(m *api.Machine) bool {
	if m.DeletionTimestamp == nil {
		return false
	}
	switch m.Status.Phase {
	case api.MachinePhaseUnavailable:
		return true
	case api.MachinePhaseDraining:
		for i := len(m.Status.Transitions) - 1; i >= 0; i-- {
			if t := m.Status.Transitions[i]; t.To == string(api.MachinePhaseDraining) {
				return t.From == string(api.MachinePhaseUnavailable)
			}
		}
	}
	return false
}

func internalIP(m *api.Machine) string {
	for _, a := range m.Status.Addresses {
		if a.Type == api.MachineInternalIP {
			return a.Address
		}
	}
	return ""
}

// someoneElses reports whether a plan the planner did not write is
// someone else's: a plan set's, or one with content. The empty plan every
// machine is given when it joins is nobody's, and the planner takes it.
func someoneElses(p *api.MachinePlan) bool {
	if p.Labels[PlannerLabel] != "" {
		return false
	}
	s := p.Spec
	return p.Labels[api.PlanSetLabel] != "" || len(s.Files) > 0 || len(s.Instructions) > 0 || len(s.Probes) > 0 || s.AgentUpgrade != nil
}

// probesHealthy: every probe of the plan's spec reports healthy.
func probesHealthy(p *api.MachinePlan) bool {
	healthy := map[string]bool{}
	for _, s := range p.Status.Probes {
		healthy[s.Name] = s.Healthy
	}
	for _, pr := range p.Spec.Probes {
		if !healthy[pr.Name] {
			return false
		}
	}
	return true
}

func (c *Controller) reconcile(ctx context.Context, cl *api.Cluster, machines []*api.Machine, planOf map[string]*api.MachinePlan) error {
	var nodes []node
	var elsewhere []string
	byName := map[string]*api.Machine{}
	var members []string
	isMember := map[string]bool{}
	if cl.Status.Kubernetes != nil {
		members = cl.Status.Kubernetes.EtcdMembers
		for _, m := range members {
			isMember[m] = true
		}
	}
	for _, m := range machines {
		// A deleted machine counts only while it is an etcd member whose
		// host is still there (not yet Deleting): it must leave etcd first.
		if m.DeletionTimestamp != nil && !(isMember[m.Name] && m.Spec.Cluster == cl.Name &&
			m.Status.Phase != api.MachinePhaseDeleting && m.Status.Phase != api.MachinePhaseDeleted) {
			continue
		}
		if m.Spec.Cluster != cl.Name {
			for _, r := range m.Spec.Roles {
				if (r == api.EtcdRole || r == api.ControlPlaneRole) && len(elsewhere) < 5 {
					elsewhere = append(elsewhere, fmt.Sprintf("%s (role %s, cluster %s)", m.Name, r, m.Spec.Cluster))
					break
				}
			}
			continue
		}
		byName[m.Name] = m
		n := node{name: m.Name, roles: map[string]bool{}, address: internalIP(m), deleting: m.DeletionTimestamp != nil, agentGone: agentGone(m)}
		for _, r := range m.Spec.Roles {
			n.roles[r] = true
		}
		if p := planOf[m.Name]; p != nil {
			if p.Labels[PlannerLabel] == cl.Name {
				n.planned = true
				n.failed = p.FailedForGood()
				n.plannedStage = p.Labels[StageLabel]
				n.version = p.Labels[VersionLabel]
				n.versionSince, _ = time.Parse(time.RFC3339Nano, p.Annotations[VersionSinceAnnotation])
				n.planFailed = p.Status.State == api.PlanStateFailed && p.Status.FailureCount > 0
				if p.Applied() && probesHealthy(p) {
					n.healthyStage = p.Labels[StageLabel]
				}
				for _, ps := range p.Status.Probes {
					n.etcdHealthy = n.etcdHealthy || (ps.Name == "etcd" && ps.Healthy)
				}
				n.removing = p.Annotations[RemovesAnnotation]
				if p.Applied() {
					n.removed = n.removing
				}
			} else if someoneElses(p) && (n.roles[api.EtcdRole] || n.roles[api.ControlPlaneRole] || n.roles[api.WorkerRole]) {
				n.foreign = true
			}
		}
		nodes = append(nodes, n)
	}
	d := order(nodes, members, elsewhere)
	in := c.rollInput(cl, byName)
	drainInput(&in, cl.Name, planOf)
	r := roll(&d, nodes, in)
	for _, m := range d.release {
		if p := planOf[m]; p != nil {
			if err := c.release(ctx, p); err != nil {
				return err
			}
		}
	}
	var writeErr error
	if d.invalid == "" {
		writeErr = c.writePlans(ctx, cl, d, r, byName, planOf)
	}
	if err := c.writeStatus(ctx, cl, d, r); err != nil {
		return err
	}
	return writeErr
}

// rollInput reads what a version change is decided from off the cluster,
// and whether spec's version can be planned on its machines.
func (c *Controller) rollInput(cl *api.Cluster, machines map[string]*api.Machine) rollInput {
	k := cl.Spec.Kubernetes
	in := rollInput{spec: k.Version, cpConcurrency: 1, workerConcurrency: 1,
		timeout: api.DefaultUpgradeHealthTimeoutSeconds * time.Second, now: time.Now()}
	if st := cl.Status.Kubernetes; st != nil {
		in.running, in.failed = st.Version, st.FailedVersion
	}
	if u := k.UpgradeStrategy; u != nil {
		if u.ControlPlaneConcurrency > 0 {
			in.cpConcurrency = int(u.ControlPlaneConcurrency)
		}
		if u.WorkerConcurrency > 0 {
			in.workerConcurrency = int(u.WorkerConcurrency)
		}
		if u.HealthTimeoutSeconds > 0 {
			in.timeout = time.Duration(u.HealthTimeoutSeconds) * time.Second
		}
	}
	in.drain = drainEnabled(k)
	if cond := meta.FindStatusCondition(cl.Status.Conditions, CondUpgrade); cond != nil && (cond.Reason == ReasonReverted || cond.Reason == ReasonReverting) {
		in.failedWhy = failedReason(cond.Message)
		in.reverting = cond.Reason == ReasonReverting
	}
	names := make([]string, 0, len(machines))
	for n := range machines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, err := c.bin.resolve(k.Version, machines[n].Status.Platform, k.Binaries); err != nil {
			in.unavailable = err.Error()
			break
		}
	}
	return in
}

// drainInput reads which workers the planner's plans drain and uncordon,
// and which of those ran: an instruction ran when its plan was applied,
// and did it when its output's last line says so.
func drainInput(in *rollInput, cluster string, planOf map[string]*api.MachinePlan) {
	in.drains, in.uncordons, in.drained, in.uncordoned, in.drainFailed = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]string{}
	lastLine := func(p *api.MachinePlan, instr string) (string, string) {
		for _, o := range p.Status.Output {
			if o.Name == instr {
				out := strings.TrimSpace(o.Output)
				return out[strings.LastIndex(out, "\n")+1:], out
			}
		}
		return "", ""
	}
	for _, p := range planOf {
		if p.Labels[PlannerLabel] != cluster {
			continue
		}
		for _, w := range splitList(p.Annotations[DrainsAnnotation]) {
			in.drains[w] = true
			if !p.Applied() {
				continue
			}
			switch last, out := lastLine(p, "drain-"+w); {
			case last == drainedLine(w):
				in.drained[w] = true
			default:
				in.drainFailed[w] = fmt.Sprintf("machine %s's plan ran kubectl drain %s: %q (kubectl get machineplan %s -o yaml: status.output; fix what stops the eviction, e.g. a PodDisruptionBudget, then change spec.kubernetes.upgradeStrategy.drainWorkers, e.g. its timeoutSeconds, to drain again, or set enabled: false)", p.Name, w, out, p.Name)
			}
		}
		for _, w := range splitList(p.Annotations[UncordonsAnnotation]) {
			in.uncordons[w] = true
			if last, _ := lastLine(p, "uncordon-"+w); p.Applied() && last == uncordonedLine(w) {
				in.uncordoned[w] = true
			}
		}
	}
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// pinned are the binaries the cluster pins for version: spec's for its
// version, else those recorded for the version that ran.
func pinned(cl *api.Cluster, version string) []api.KubernetesBinary {
	if version == cl.Spec.Kubernetes.Version {
		return cl.Spec.Kubernetes.Binaries
	}
	if st := cl.Status.Kubernetes; st != nil && st.Version == version {
		return st.Binaries
	}
	return nil
}

// drainEnabled: upgradeStrategy.drainWorkers.enabled, true when unset.
func drainEnabled(k *api.ClusterKubernetes) bool {
	if u := k.UpgradeStrategy; u != nil && u.DrainWorkers != nil && u.DrainWorkers.Enabled != nil {
		return *u.DrainWorkers.Enabled
	}
	return true
}

// drainTimeout: upgradeStrategy.drainWorkers.timeoutSeconds, or its default.
func drainTimeout(k *api.ClusterKubernetes) int32 {
	if u := k.UpgradeStrategy; u != nil && u.DrainWorkers != nil && u.DrainWorkers.TimeoutSeconds > 0 {
		return u.DrainWorkers.TimeoutSeconds
	}
	return api.DefaultWorkerDrainTimeoutSeconds
}

// clusterPKI returns the cluster's PKI: the one this leader made, else
// the one in a plan it wrote, else a new one.
func (c *Controller) clusterPKI(cl *api.Cluster, planOf map[string]*api.MachinePlan) (*clusterPKI, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pkis[cl.Name]; p != nil {
		return p, nil
	}
	names := make([]string, 0, len(planOf))
	for n := range planOf {
		names = append(names, n)
	}
	sort.Strings(names)
	// A plan that carries the CSR signer wins over one written before
	// there was one, so that a new leader keeps the signer in use.
	var older *clusterPKI
	for _, n := range names {
		if p := planOf[n]; p.Labels[PlannerLabel] == cl.Name {
			if k := pkiFromPlan(p, cl.Name); k != nil && !k.signerNew {
				c.pkis[cl.Name] = k
				return k, nil
			} else if k != nil && older == nil {
				older = k
			}
		}
	}
	if older != nil {
		c.pkis[cl.Name] = older
		return older, nil
	}
	k, err := newClusterPKI(cl.Name)
	if err != nil {
		return nil, fmt.Errorf("making the cluster's CA and keys: %w", err)
	}
	c.pkis[cl.Name] = k
	return k, nil
}

func (c *Controller) writePlans(ctx context.Context, cl *api.Cluster, d decision, r rollout, byName map[string]*api.Machine, planOf map[string]*api.MachinePlan) error {
	k, err := c.clusterPKI(cl, planOf)
	if err != nil {
		return err
	}
	var members []member
	for _, m := range d.members {
		members = append(members, member{name: m, address: internalIP(byName[m])})
	}
	// Workers talk to the first control-plane machine by name (all are
	// healthy before any worker is planned).
	var apiServer string
	var cps []string
	for name, s := range d.stages {
		if s.apiServer {
			cps = append(cps, name)
		}
	}
	sort.Strings(cps)
	if len(cps) > 0 {
		apiServer = internalIP(byName[cps[0]])
	}
	names := make([]string, 0, len(d.stages))
	for n := range d.stages {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []string
	for _, name := range names {
		s := d.stages[name]
		old := planOf[name]
		existing := map[string]string{}
		if old != nil && old.Labels[PlannerLabel] == cl.Name {
			for _, f := range old.Spec.Files {
				existing[path.Base(f.Path)] = f.Content
			}
		} else if old != nil && someoneElses(old) {
			continue // order() waits on it
		}
		version := r.versions[name]
		if version == "" {
			version = cl.Spec.Kubernetes.Version
		}
		bin, err := c.bin.resolve(version, byName[name].Status.Platform, pinned(cl, version))
		if err != nil {
			errs = append(errs, fmt.Sprintf("machine %s: %v", name, err))
			continue
		}
		in := renderInput{cluster: cl.Name, spec: *cl.Spec.Kubernetes, machine: name, address: internalIP(byName[name]),
			stage: s, allMembers: members, apiServer: apiServer, pki: k, bin: bin, existing: existing}
		in.spec.Version = version
		if s.remove != "" {
			in.removeAddress = internalIP(byName[s.remove])
		}
		if s.etcdMember >= 0 {
			in.members = members[:s.etcdMember+1]
		}
		var drains, uncordons []string
		if len(cps) > 0 && name == cps[0] {
			// The first control-plane machine drains and uncordons the
			// workers (all control-plane machines are healthy before a
			// worker is drained).
			drains, uncordons = r.drain, r.uncordon
			in.drain, in.uncordon, in.drainTimeout = drains, uncordons, drainTimeout(cl.Spec.Kubernetes)
		}
		spec, err := render(in)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if err := c.writePlan(ctx, cl.Name, name, s, version, drains, uncordons, spec, old); err != nil {
			errs = append(errs, fmt.Sprintf("writing machine %s's plan: %v", name, err))
		}
	}
	if len(cps) > 0 {
		if err := c.writeAPI(ctx, cl, k); err != nil {
			errs = append(errs, fmt.Sprintf("writing spec.kubernetesAPI: %v", err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// planMeta is what the planner marks a plan with: its own labels; on an
// etcd member's, that the planner writes its drain plan (the Machine waits
// for it when deleted: the member leaves etcd before its host goes); on
// that drain plan, the drain label and deadline the lifecycle reads.
func planMeta(p *metav1.ObjectMeta, cluster string, s stage, version string, drains, uncordons []string) {
	stageKey := s.key()
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if p.Labels[VersionLabel] != version || p.Annotations[VersionSinceAnnotation] == "" {
		p.Annotations[VersionSinceAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
	}
	p.Labels[PlannerLabel], p.Labels[StageLabel], p.Labels[VersionLabel] = cluster, stageKey, version
	delete(p.Annotations, api.PlanDrainByAnnotation)
	delete(p.Annotations, RemovesAnnotation)
	if s.remove != "" {
		p.Annotations[RemovesAnnotation] = s.remove
	}
	delete(p.Annotations, DrainsAnnotation)
	delete(p.Annotations, UncordonsAnnotation)
	if len(drains) > 0 {
		p.Annotations[DrainsAnnotation] = strings.Join(drains, ",")
	}
	if len(uncordons) > 0 {
		p.Annotations[UncordonsAnnotation] = strings.Join(uncordons, ",")
	}
	switch {
	case stageKey == "leave":
		p.Labels[api.PlanDrainLabel] = "true"
		if p.Annotations[api.PlanDrainDeadlineAnnotation] == "" {
			p.Annotations[api.PlanDrainDeadlineAnnotation] = time.Now().Add(api.DefaultDrainTimeout).UTC().Format(time.RFC3339Nano)
		}
	case covers(stageKey, "etcd"):
		p.Annotations[api.PlanDrainByAnnotation] = "planner"
	}
}

func (c *Controller) writePlan(ctx context.Context, cluster, name string, s stage, version string, drains, uncordons []string, spec api.MachinePlanSpec, old *api.MachinePlan) error {
	plans := c.client.MusterV1alpha1().MachinePlans()
	stageKey := s.key()
	if old == nil {
		p := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		planMeta(&p.ObjectMeta, cluster, s, version, drains, uncordons)
		_, err := plans.Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache is behind: the next pass sees it
		}
		if err == nil {
			klog.InfoS("Planner wrote a machine's plan", "cluster", cluster, "machine", name, "stage", stageKey, "version", version)
		}
		return err
	}
	p := old.DeepCopy()
	p.Spec = spec
	planMeta(&p.ObjectMeta, cluster, s, version, drains, uncordons)
	if equality.Semantic.DeepEqual(old.Spec, p.Spec) && equality.Semantic.DeepEqual(old.Labels, p.Labels) && equality.Semantic.DeepEqual(old.Annotations, p.Annotations) {
		return nil
	}
	_, err := plans.Update(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		klog.InfoS("Planner changed a machine's plan", "cluster", cluster, "machine", name, "stage", stageKey, "version", version)
	}
	return err
}

// release drops a plan's PlanDrainByAnnotation: its machine's deletion
// no longer waits for the planner.
func (c *Controller) release(ctx context.Context, p *api.MachinePlan) error {
	if p.Annotations[api.PlanDrainByAnnotation] == "" {
		return nil
	}
	next := p.DeepCopy()
	delete(next.Annotations, api.PlanDrainByAnnotation)
	_, err := c.client.MusterV1alpha1().MachinePlans().Update(ctx, next, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing machine %s's deletion: %w", p.Name, err)
	}
	return nil
}

// writeAPI points the cluster's spec.kubernetesAPI at the kube-apiserver
// the planner starts: its CA, and a client certificate in system:masters
// (allowed to impersonate) for the server's proxy. A credential the
// cluster's CA signed is kept.
func (c *Controller) writeAPI(ctx context.Context, cl *api.Cluster, k *clusterPKI) error {
	port := int32(api.DefaultKubernetesAPIPort)
	if cl.Spec.Kubernetes.APIServerPort != 0 {
		port = cl.Spec.Kubernetes.APIServerPort
	}
	want := &api.ClusterKubernetesAPI{Port: port, CACertificate: string(k.ca.CertPEM)}
	if cur := cl.Spec.KubernetesAPI; cur != nil && cur.CACertificate == want.CACertificate && signedBy(cur.Credential.ClientCertificate, k.ca) {
		want.Credential = cur.Credential
	} else {
		cert, key, err := k.ca.IssueClient("muster-proxy", []string{"system:masters"}, certValidity)
		if err != nil {
			return err
		}
		want.Credential = api.ClusterAPICredential{ClientCertificate: string(cert), ClientKey: string(key)}
	}
	if equality.Semantic.DeepEqual(cl.Spec.KubernetesAPI, want) {
		return nil
	}
	next := cl.DeepCopy()
	next.Spec.KubernetesAPI = want
	_, err := c.client.MusterV1alpha1().Clusters().Update(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func signedBy(certPEM string, ca *pki.CA) bool {
	certs, err := pki.ParseCertsPEM([]byte(certPEM))
	if err != nil {
		return false
	}
	_, err = certs[0].Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil && time.Until(certs[0].NotAfter) > 30*24*time.Hour
}

func (c *Controller) writeStatus(ctx context.Context, cl *api.Cluster, d decision, r rollout) error {
	next := cl.DeepCopy()
	st := &api.ClusterKubernetesStatus{Phase: d.phase, WaitingFor: d.waitingFor, Message: d.message, EtcdMembers: d.members,
		Version: r.running, FailedVersion: r.failed, Binaries: pinned(cl, r.running)}
	next.Status.Kubernetes = st
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: cl.Generation})
	}
	switch {
	case d.invalid != "":
		set(CondRoles, false, "MissingRoles", d.invalid)
	case len(d.warnings) > 0:
		set(CondRoles, false, "Warning", strings.Join(d.warnings, "; "))
	default:
		set(CondRoles, true, "RolesComplete", "the machines' roles make a cluster")
	}
	for _, t := range []string{CondEtcd, CondControlPlane, CondWorkers} {
		tr, ok := d.tiers[t]
		switch {
		case ok:
			set(t, tr.done, tr.reason, tr.message)
		case d.invalid != "":
			set(t, false, "MissingRoles", "nothing is started: see "+CondRoles)
		default:
			set(t, false, "Waiting", "waiting for the tiers before it")
		}
	}
	set(CondReady, d.phase == api.KubernetesPhaseReady, d.phase, d.message)
	set(CondUpgrade, r.cond.done, r.cond.reason, r.cond.message)
	if old := cl.Status.Kubernetes; old != nil && old.Version != "" && old.Version != st.Version {
		klog.InfoS("Planner: the cluster's Kubernetes version changed", "cluster", cl.Name, "from", old.Version, "to", st.Version)
	}
	if st.FailedVersion != "" && (cl.Status.Kubernetes == nil || cl.Status.Kubernetes.FailedVersion != st.FailedVersion) {
		klog.InfoS("Planner reverts a Kubernetes upgrade", "cluster", cl.Name, "failedVersion", st.FailedVersion, "why", r.cond.message)
	}
	if equality.Semantic.DeepEqual(cl.Status, next.Status) {
		return nil
	}
	if old := cl.Status.Kubernetes; old == nil || old.Phase != st.Phase {
		klog.InfoS("Planner", "cluster", cl.Name, "phase", st.Phase, "waitingFor", st.WaitingFor)
	}
	_, err := c.client.MusterV1alpha1().Clusters().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

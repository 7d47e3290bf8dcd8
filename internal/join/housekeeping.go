package join

import (
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// Housekeeping timings. k3s collects node-password secrets whose node never
// appeared after 10 minutes; we do the same.
const (
	OrphanNodePasswordGrace = 10 * time.Minute
	// PendingRegistrationTTL is how long a registration may wait for
	// approval before it expires; the agent then has to ask again.
	PendingRegistrationTTL = 24 * time.Hour
	// ExpiredTokenRetention keeps expired and revoked tokens visible for a
	// while before they are deleted.
	ExpiredTokenRetention = 24 * time.Hour
	// DecidedRegistrationRetention keeps denied and expired registrations
	// visible (with the reason) for a while before they are deleted, and
	// is how long a granted registration whose Machine is gone is kept.
	DecidedRegistrationRetention = 24 * time.Hour
	// EmptyOwnClusterGrace is how long the Cluster the server made for
	// one agent (a token bound to no cluster) must be seen empty, and
	// without a request from that agent, before it is deleted: a machine
	// being granted into it right now is never left without its cluster.
	EmptyOwnClusterGrace = 2 * time.Minute
	housekeepingPeriod   = 30 * time.Second
)

// Housekeeper deletes what joining leaves behind: the NodePassword of a
// deleted Machine (so the node can rejoin), NodePasswords whose Machine never
// appeared, expired tokens, registrations that waited too long, superseded
// ones, decided ones past their retention, and the empty Clusters the
// server made for single agents. It is the one place each of
// these is cleaned up (the controller only deletes an agent's superseded
// requests as it grants the newest).
type Housekeeper struct {
	client        versioned.Interface
	machines      listers.MachineLister
	passwords     listers.NodePasswordLister
	tokens        listers.ClusterRegistrationTokenLister
	registrations listers.ClusterRegistrationLister
	clusters      listers.ClusterLister
	synced        []cache.InformerSynced
	now           func() time.Time
	// emptySince is when each server-made Cluster was first seen empty
	// in a row of sweeps; only the sweeps touch it.
	emptySince map[string]time.Time
}

// NewHousekeeper wires the housekeeper to its informers.
func (j *Join) NewHousekeeper(client versioned.Interface, factory informers.SharedInformerFactory) *Housekeeper {
	return NewHousekeeper(client, factory)
}

// NewHousekeeper wires a housekeeper to its informers.
func NewHousekeeper(client versioned.Interface, factory informers.SharedInformerFactory) *Housekeeper {
	v := factory.Muster().V1alpha1()
	h := &Housekeeper{
		client: client, machines: v.Machines().Lister(), passwords: v.NodePasswords().Lister(),
		tokens: v.ClusterRegistrationTokens().Lister(), registrations: v.ClusterRegistrations().Lister(),
		clusters: v.Clusters().Lister(),
		synced: []cache.InformerSynced{v.Machines().Informer().HasSynced, v.NodePasswords().Informer().HasSynced,
			v.ClusterRegistrationTokens().Informer().HasSynced, v.ClusterRegistrations().Informer().HasSynced,
			v.Clusters().Informer().HasSynced},
		now: time.Now, emptySince: map[string]time.Time{},
	}
	// A deleted Machine's password is deleted by the Machine's finalizer
	// (internal/lifecycle), before the Machine goes: the one place for it.
	// Deleting it again on the Machine's delete event could delete the
	// password of the node that re-joined under the name meanwhile.
	return h
}

// Run sweeps periodically until ctx ends.
func (h *Housekeeper) Run(ctx context.Context) {
	if !cache.WaitForCacheSync(ctx.Done(), h.synced...) {
		return
	}
	wait.UntilWithContext(ctx, h.sweep, housekeepingPeriod)
}

func (h *Housekeeper) sweep(ctx context.Context) {
	now := h.now()
	passwords, _ := h.passwords.List(labels.Everything())
	for _, np := range passwords {
		// A password is stored a moment before its Machine is created (a
		// grant binds it in that same moment), so only the grace period
		// tells a password whose Machine is gone from one whose Machine is
		// on its way. A deleted Machine's password goes at once anyway:
		// with the Machine's finalizer, and on its delete event.
		if _, err := h.machines.Get(np.Name); !apierrors.IsNotFound(err) || now.Sub(np.CreationTimestamp.Time) <= OrphanNodePasswordGrace {
			continue
		}
		why := "no machine appeared for it within the grace period"
		if np.Status.Machine != "" {
			why = "its machine was deleted"
		}
		h.deletePassword(ctx, np.Name, why)
	}
	tokens, _ := h.tokens.List(labels.Everything())
	for _, t := range tokens {
		switch {
		case t.Status.Phase == api.TokenPhaseActive && t.Status.ExpiresAt != nil && !now.Before(t.Status.ExpiresAt.Time):
			t = t.DeepCopy()
			t.Status.Phase, t.Status.Reason = api.TokenPhaseExpired, "TTLPassed"
			if _, err := h.client.MusterV1alpha1().ClusterRegistrationTokens().UpdateStatus(ctx, t, metav1.UpdateOptions{}); err != nil {
				klog.ErrorS(err, "Expiring a join token", "token", t.Name)
			}
		case t.Status.Phase != api.TokenPhaseActive && lastTransition(t.Status.Transitions).Add(ExpiredTokenRetention).Before(now):
			h.delete(ctx, "token", t.Name, h.client.MusterV1alpha1().ClusterRegistrationTokens().Delete)
		}
	}
	regs, _ := h.registrations.List(labels.Everything())
	// Requests superseded by a newer granted one of the same agent for the
	// same node: the controller deletes them, this catches any its cache
	// had not seen.
	newest := map[string]*api.ClusterRegistration{}
	for _, r := range regs {
		if n := newest[nodeAndClient(r)]; r.Status.Phase == api.RegistrationPhaseGranted && (n == nil || olderThan(n, r)) {
			newest[nodeAndClient(r)] = r
		}
	}
	deleteReg := h.client.MusterV1alpha1().ClusterRegistrations().Delete
	for _, r := range regs {
		if n := newest[nodeAndClient(r)]; n != nil && olderThan(r, n) {
			h.delete(ctx, "registration", r.Name, deleteReg)
			continue
		}
		decided := r.Status.Phase == api.RegistrationPhaseDenied || r.Status.Phase == api.RegistrationPhaseExpired
		if decided && lastTransition(r.Status.Transitions).Add(DecidedRegistrationRetention).Before(now) {
			h.delete(ctx, "registration", r.Name, deleteReg)
			continue
		}
		// A granted request outlives its Machine only for a while: it
		// holds a certificate nobody can use any more.
		if r.Status.Phase == api.RegistrationPhaseGranted && now.Sub(r.CreationTimestamp.Time) > OrphanNodePasswordGrace {
			if _, err := h.machines.Get(r.Status.Machine); apierrors.IsNotFound(err) {
				h.delete(ctx, "registration", r.Name, deleteReg)
			}
		}
	}
	h.sweepOwnClusters(ctx, now, regs)
	for _, r := range regs {
		waiting := r.Status.Phase == api.RegistrationPhasePending || r.Status.Phase == api.RegistrationPhaseApproved
		if waiting && now.Sub(r.CreationTimestamp.Time) > PendingRegistrationTTL {
			r = r.DeepCopy()
			r.Status.Phase, r.Status.Reason = api.RegistrationPhaseExpired, "NotApprovedInTime"
			r.Status.Message = "the registration waited longer than 24h; restart the agent with a valid token to ask again"
			if _, err := h.client.MusterV1alpha1().ClusterRegistrations().UpdateStatus(ctx, r, metav1.UpdateOptions{}); err != nil {
				klog.ErrorS(err, "Expiring a registration", "registration", r.Name)
			}
		}
	}
}

// sweepOwnClusters deletes the Clusters the server made for single agents
// (spec.clientID set: never an operator's) once they have been empty for
// EmptyOwnClusterGrace and their agent has not asked to join for as long:
// nothing else would ever delete them. The delete is bound to the Cluster's
// UID. Deleting a Cluster deletes its Machines (internal/lifecycle), so the
// datastore is asked, not the cache, whether it is still empty: a Machine
// joins only after its agent asks (a registration, which keeps the cluster
// for the grace), and this read closes the gap of a cache that lags.
func (h *Housekeeper) sweepOwnClusters(ctx context.Context, now time.Time, regs []*api.ClusterRegistration) {
	inUse := map[string]bool{}
	machines, _ := h.machines.List(labels.Everything())
	for _, m := range machines {
		inUse[m.Spec.Cluster] = true
	}
	asked := map[string]time.Time{}
	for _, r := range regs {
		if t := r.CreationTimestamp.Time; t.After(asked[r.Spec.ClientID]) {
			asked[r.Spec.ClientID] = t
		}
	}
	clusters, _ := h.clusters.List(labels.Everything())
	seen := map[string]bool{}
	for _, c := range clusters {
		if c.Spec.ClientID == "" || c.DeletionTimestamp != nil {
			continue
		}
		seen[c.Name] = true
		if inUse[c.Name] {
			delete(h.emptySince, c.Name)
			continue
		}
		since, ok := h.emptySince[c.Name]
		if !ok {
			h.emptySince[c.Name] = now
			continue
		}
		recent := func(t time.Time) bool { return now.Sub(t) < EmptyOwnClusterGrace }
		if recent(since) || recent(c.CreationTimestamp.Time) || recent(asked[c.Spec.ClientID]) {
			continue
		}
		live, err := h.client.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{FieldSelector: "spec.cluster=" + c.Name, Limit: 1})
		if err != nil || slices.ContainsFunc(live.Items, func(m api.Machine) bool { return m.Spec.Cluster == c.Name }) {
			continue // unreadable, or a Machine arrived: the next sweep looks again
		}
		uid := c.UID
		err = h.client.MusterV1alpha1().Clusters().Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			klog.InfoS("Deleted an empty cluster made for one agent", "cluster", c.Name, "emptyFor", now.Sub(since).Round(time.Second))
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or a Machine arrived: the next sweep looks again.
		default:
			klog.ErrorS(err, "Housekeeping delete failed", "kind", "cluster", "name", c.Name)
		}
		delete(h.emptySince, c.Name)
	}
	for name := range h.emptySince {
		if !seen[name] {
			delete(h.emptySince, name)
		}
	}
}

func lastTransition(ts []api.Transition) time.Time {
	if len(ts) == 0 {
		return time.Time{}
	}
	return ts[len(ts)-1].Time.Time
}

func (h *Housekeeper) deletePassword(ctx context.Context, name, why string) {
	if h.delete(ctx, "node password", name, h.client.MusterV1alpha1().NodePasswords().Delete) {
		klog.InfoS("Deleted a node password", "node", name, "reason", why)
	}
}

func (h *Housekeeper) delete(ctx context.Context, what, name string, del func(context.Context, string, metav1.DeleteOptions) error) bool {
	err := del(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "Housekeeping delete failed", "kind", what, "name", name)
		return false
	}
	return err == nil
}

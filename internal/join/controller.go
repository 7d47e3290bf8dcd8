package join

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/muster-io/muster/internal/reconcile"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/metrics"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/registry"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// Controller drives the registrations that were not granted as they were
// made: a pending request whose token is gone or no longer active is
// denied; one an operator approved is granted through the Granter — which
// re-checks everything at grant time — or denied with the Granter's reason.
// For granted registrations it deletes the same agent's older requests.
type Controller struct {
	objects       *registry.Objects
	granter       *Granter
	registrations listers.ClusterRegistrationLister
	byNode        cache.Indexer
	queue         workqueue.TypedRateLimitingInterface[string]
	synced        []cache.InformerSynced
}

// byNodeAndClient indexes registrations by the agent and node name that made
// them: an agent's retries share both, and nobody else can share both
// without the node's password.
const byNodeAndClient = "spec.nodeName+clientID"

func nodeAndClient(r *api.ClusterRegistration) string {
	return r.Spec.NodeName + "/" + r.Spec.ClientID
}

// NewController wires the controller to its informers.
func (j *Join) NewController(factory informers.SharedInformerFactory) *Controller {
	regs := factory.Muster().V1alpha1().ClusterRegistrations()
	indexer := regs.Informer().GetIndexer()
	if _, ok := indexer.GetIndexers()[byNodeAndClient]; !ok {
		// The informer outlives a term of leadership; the index is added once.
		_ = regs.Informer().AddIndexers(cache.Indexers{byNodeAndClient: func(obj interface{}) ([]string, error) {
			if r, ok := obj.(*api.ClusterRegistration); ok {
				return []string{nodeAndClient(r)}, nil
			}
			return nil, nil
		}})
	}
	c := &Controller{
		objects:       j.objects,
		granter:       j.grants,
		registrations: regs.Lister(),
		byNode:        indexer,
		queue:         workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		synced:        []cache.InformerSynced{regs.Informer().HasSynced},
	}
	enqueue := func(obj interface{}) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = regs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	return c
}

// Run processes registrations until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			reconcile.Work(ctx, c.queue, c.sync, func(key string, err error) {
				klog.ErrorS(err, "Registration not decided yet; will retry", "registration", key)
			})
		}, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) sync(ctx context.Context, name string) error {
	reg, err := c.registrations.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	switch reg.Status.Phase {
	case api.RegistrationPhasePending, "":
		// A waiting request whose token is gone or spent can never be
		// granted: deny it now, saying why, rather than at approval.
		if reg.Spec.TokenID == "" {
			return nil
		}
		if _, err := c.granter.checkToken(ctx, reg); err != nil {
			var refusal *Refusal
			if errors.As(err, &refusal) {
				return c.deny(ctx, reg.Name, refusal)
			}
			return err
		}
	case api.RegistrationPhaseApproved:
		return c.grant(ctx, reg.Name)
	case api.RegistrationPhaseGranted:
		c.cleanupSuperseded(ctx, reg)
	case api.RegistrationPhaseDenied:
		c.granter.recordOperatorDenial(reg)
	}
	return nil
}

// deny records a refusal on a registration that waits.
func (c *Controller) deny(ctx context.Context, name string, refusal *Refusal) error {
	wrote := false
	denied, err := c.objects.UpdateRegistrationStatus(ctx, name, func(r *api.ClusterRegistration) bool {
		wrote = r.Status.Phase == api.RegistrationPhasePending || r.Status.Phase == api.RegistrationPhaseApproved
		if !wrote {
			return false
		}
		r.Status.Phase, r.Status.Reason, r.Status.Message = api.RegistrationPhaseDenied, refusal.Reason, refusal.Message
		return true
	})
	if err == nil {
		klog.InfoS("Registration denied", "registration", name, "reason", refusal.Reason)
		c.granter.recordRefusal(denied, refusal)
		if wrote {
			metrics.Registration(metrics.OutcomeDenied, refusal.Reason)
		}
	}
	return err
}

func (c *Controller) grant(ctx context.Context, name string) error {
	// The server's caches keep no CSRs (they would be kept for every
	// agent that ever joined); the one to sign is read from the datastore.
	reg, err := c.objects.Registration(ctx, name, true)
	if err != nil {
		return err
	}
	if reg.Status.Phase != api.RegistrationPhaseApproved {
		return nil // decided meanwhile; its update event brings it back
	}
	csr, err := pki.ParseCSR(reg.Spec.CSR)
	if err != nil {
		return c.deny(ctx, name, refuse(0, "InvalidCSR", "the certificate request is unusable: %v", err))
	}
	got, err := c.granter.Grant(ctx, reg, csr, "", false)
	var refusal *Refusal
	if errors.As(err, &refusal) {
		return c.deny(ctx, name, refusal)
	}
	if err != nil {
		return err
	}
	wrote := false
	_, err = c.objects.UpdateRegistrationStatus(ctx, name, func(r *api.ClusterRegistration) bool {
		if wrote = r.Status.Phase == api.RegistrationPhaseApproved; !wrote {
			return false
		}
		r.Status.Phase, r.Status.Reason, r.Status.Message = api.RegistrationPhaseGranted, "Granted", ""
		r.Status.Cluster, r.Status.Machine, r.Status.Certificate = got.cluster, got.machine, got.certificate
		return true
	})
	if err == nil && wrote {
		klog.InfoS("Registration granted", "registration", name, "machine", got.machine, "cluster", got.cluster)
		c.granter.recordGrant(reg, got)
		metrics.Registration(metrics.OutcomeGranted, metrics.ReasonApprovedByOperator)
	}
	return err
}

// cleanupSuperseded deletes the requests of granted's agent for the same
// node that are older than its newest granted one, so retries never pile
// up (Fleet's orphaned-registration bug). "Older" is one total order
// (creation time, then name), and every pass deletes against the newest
// granted request it sees, not against the one it was woken for: requests
// granted at once and seen in any order still leave exactly the newest.
// Only requests with the same node name and clientID count: a clientID
// copied by another agent reaches no one else's requests.
func (c *Controller) cleanupSuperseded(ctx context.Context, granted *api.ClusterRegistration) {
	same, err := c.byNode.ByIndex(byNodeAndClient, nodeAndClient(granted))
	if err != nil {
		return
	}
	newest := granted
	for _, obj := range same {
		if r := obj.(*api.ClusterRegistration); r.Status.Phase == api.RegistrationPhaseGranted && olderThan(newest, r) {
			newest = r
		}
	}
	for _, obj := range same {
		r := obj.(*api.ClusterRegistration)
		if !olderThan(r, newest) {
			continue
		}
		if err := c.objects.DeleteRegistration(ctx, r.Name); err != nil && !apierrors.IsNotFound(err) {
			klog.ErrorS(err, "Deleting a superseded registration", "registration", r.Name)
		}
	}
}

// Decide is an operator's approval or denial of a pending registration.
// The state machine refuses it for a registration already decided, and the
// 422 says which phase it is in.
func Decide(ctx context.Context, client versioned.Interface, name string, approve bool, message string) error {
	regs := client.MusterV1alpha1().ClusterRegistrations()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		reg, err := regs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("registration %q: %w (list them with 'kubectl get clusterregistrations')", name, err)
		}
		reg.Status.Phase, reg.Status.Reason, reg.Status.Message = api.RegistrationPhaseApproved, "ApprovedByOperator", message
		if !approve {
			reg.Status.Phase, reg.Status.Reason = api.RegistrationPhaseDenied, "DeniedByOperator"
		}
		_, err = regs.UpdateStatus(ctx, reg, metav1.UpdateOptions{})
		return err
	})
}

func olderThan(a, b *api.ClusterRegistration) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

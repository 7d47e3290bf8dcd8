package registration

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// DefaultCertificateValidity is how long a granted machine certificate is
// valid; agents renew at two thirds of it.
const DefaultCertificateValidity = 365 * 24 * time.Hour

// Controller drives the registrations that were not granted as they were
// made through their state machine: Pending → Approved (by an operator, for
// manual-approval tokens) → Granted, through the Granter. For granted
// registrations it deletes the same agent's older requests.
type Controller struct {
	client        versioned.Interface
	granter       *Granter
	registrations listers.ClusterRegistrationLister
	byClient      cache.Indexer
	queue         workqueue.TypedRateLimitingInterface[string]
	synced        []cache.InformerSynced
}

// byClientID indexes registrations by the agent that made them.
const byClientID = "spec.clientID"

// NewController wires the controller to its informers.
func NewController(client versioned.Interface, factory informers.SharedInformerFactory, granter *Granter) *Controller {
	regs := factory.Muster().V1alpha1().ClusterRegistrations()
	indexer := regs.Informer().GetIndexer()
	if _, ok := indexer.GetIndexers()[byClientID]; !ok {
		// The informer outlives a term of leadership; the index is added once.
		_ = regs.Informer().AddIndexers(cache.Indexers{byClientID: func(obj interface{}) ([]string, error) {
			if r, ok := obj.(*api.ClusterRegistration); ok {
				return []string{r.Spec.ClientID}, nil
			}
			return nil, nil
		}})
	}
	c := &Controller{
		client:        client,
		granter:       granter,
		registrations: regs.Lister(),
		byClient:      indexer,
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
			for c.next(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		klog.ErrorS(err, "Registration not granted yet; will retry", "registration", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
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
		if reg.Spec.TokenID != "" {
			if _, err := c.granter.token(ctx, reg.Spec.TokenID); apierrors.IsNotFound(err) {
				return c.setPhase(ctx, reg, api.RegistrationPhaseDenied, "TokenNotFound",
					fmt.Sprintf("join token %s no longer exists: create a new one with 'muster-server token create'", reg.Spec.TokenID))
			}
		}
		auto, err := c.granter.AutoApproved(ctx, reg)
		if err != nil || !auto {
			return err // a manual one waits for 'muster-server registration approve'
		}
		return c.setPhase(ctx, reg, api.RegistrationPhaseApproved, "AutoApproved", "the join token does not require manual approval")
	case api.RegistrationPhaseApproved:
		return c.grant(ctx, reg)
	case api.RegistrationPhaseGranted:
		c.cleanupSuperseded(ctx, reg)
	}
	return nil
}

// setPhase writes one transition through the status subresource; the
// server checks it against the state machine and records it.
func (c *Controller) setPhase(ctx context.Context, reg *api.ClusterRegistration, phase api.RegistrationPhase, reason, message string) error {
	reg = reg.DeepCopy()
	reg.Status.Phase, reg.Status.Reason, reg.Status.Message = phase, reason, message
	_, err := c.client.MusterV1alpha1().ClusterRegistrations().UpdateStatus(ctx, reg, metav1.UpdateOptions{})
	return err
}

func (c *Controller) grant(ctx context.Context, cached *api.ClusterRegistration) error {
	// The server's caches keep no CSRs (they would be kept for every
	// agent that ever joined); the one to sign is read from the datastore.
	reg, err := c.client.MusterV1alpha1().ClusterRegistrations().Get(ctx, cached.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if reg.Status.Phase != api.RegistrationPhaseApproved {
		return nil // decided meanwhile; its update event brings it back
	}
	csr, err := pki.ParseCSR(reg.Spec.CSR)
	if err != nil {
		return c.setPhase(ctx, reg, api.RegistrationPhaseDenied, "InvalidCSR", fmt.Sprintf("the certificate request is unusable: %v", err))
	}
	cluster, machine, cert, err := c.granter.Grant(ctx, reg, csr)
	if err != nil {
		return err
	}
	granted := reg.DeepCopy()
	granted.Status.Phase, granted.Status.Reason, granted.Status.Message = api.RegistrationPhaseGranted, "Granted", ""
	granted.Status.Cluster, granted.Status.Machine, granted.Status.Certificate = cluster, machine, cert
	if _, err := c.client.MusterV1alpha1().ClusterRegistrations().UpdateStatus(ctx, granted, metav1.UpdateOptions{}); err != nil {
		return err
	}
	klog.InfoS("Registration granted", "registration", reg.Name, "machine", machine, "cluster", cluster)
	if err := c.granter.store.BindPassword(ctx, machine); err != nil {
		klog.ErrorS(err, "Binding the node password to its machine", "machine", machine)
	}
	return nil
}

// cleanupSuperseded deletes the requests of granted's agent that are older
// than its newest granted one, so retries never pile up (Fleet's
// orphaned-registration bug). "Older" is one total order (creation time,
// then name), and every pass deletes against the newest granted request it
// sees, not against the one it was woken for: requests granted at once and
// seen in any order still leave exactly the newest.
func (c *Controller) cleanupSuperseded(ctx context.Context, granted *api.ClusterRegistration) {
	same, err := c.byClient.ByIndex(byClientID, granted.Spec.ClientID)
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
		err := c.client.MusterV1alpha1().ClusterRegistrations().Delete(ctx, r.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
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

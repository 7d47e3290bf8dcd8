package registration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/identity"
	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// DefaultCertificateValidity is how long a granted machine certificate is
// valid; agents renew at two thirds of it.
const DefaultCertificateValidity = 365 * 24 * time.Hour

// Controller drives ClusterRegistrations through their state machine:
// Pending → Approved (at once, or by an operator for manual-approval tokens)
// → Granted, creating the Cluster and Machine and signing the agent's CSR.
// Every step is idempotent, so a retry, a crash or a second request from
// the same agent never makes a second Machine.
type Controller struct {
	client        versioned.Interface
	ca            *pki.CA
	registrations listers.ClusterRegistrationLister
	tokens        listers.ClusterRegistrationTokenLister
	machines      listers.MachineLister
	queue         workqueue.TypedRateLimitingInterface[string]
	synced        []cache.InformerSynced
	validity      time.Duration

	// uses counts grants per join token not yet written to its status:
	// a fleet joining with one token would otherwise serialize on
	// conflicting writes to that one object.
	usesMu sync.Mutex
	uses   map[string]int
}

// NewController wires the controller to its informers.
func NewController(client versioned.Interface, factory informers.SharedInformerFactory, ca *pki.CA, validity time.Duration) *Controller {
	regs := factory.Muster().V1alpha1().ClusterRegistrations()
	toks := factory.Muster().V1alpha1().ClusterRegistrationTokens()
	c := &Controller{
		client:        client,
		ca:            ca,
		registrations: regs.Lister(),
		tokens:        toks.Lister(),
		machines:      factory.Muster().V1alpha1().Machines().Lister(),
		queue:         workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		synced:        []cache.InformerSynced{regs.Informer().HasSynced, toks.Informer().HasSynced, factory.Muster().V1alpha1().Machines().Informer().HasSynced},
		validity:      validity,
		uses:          map[string]int{},
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
	wait.UntilWithContext(ctx, c.flushUses, usesFlushInterval)
	c.flushUses(context.Background())
}

// usesFlushInterval is how stale a token's registration count may be.
const usesFlushInterval = time.Second

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
		manual := false
		if reg.Spec.TokenID != "" {
			tok, err := c.tokens.Get(reg.Spec.TokenID)
			if err != nil {
				return c.setPhase(ctx, reg, api.RegistrationPhaseDenied, "TokenNotFound",
					fmt.Sprintf("join token %s no longer exists: create a new one with 'muster-server token create'", reg.Spec.TokenID))
			}
			manual = tok.Spec.ManualApproval
		}
		if manual {
			return nil // waits for 'muster-server registration approve'
		}
		return c.setPhase(ctx, reg, api.RegistrationPhaseApproved, "AutoApproved", "the join token does not require manual approval")
	case api.RegistrationPhaseApproved:
		return c.grant(ctx, reg)
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

func (c *Controller) grant(ctx context.Context, reg *api.ClusterRegistration) error {
	csr, err := pki.ParseCSR(reg.Spec.CSR)
	if err != nil {
		return c.setPhase(ctx, reg, api.RegistrationPhaseDenied, "InvalidCSR", fmt.Sprintf("the certificate request is unusable: %v", err))
	}
	machine, err := c.ensureMachine(ctx, reg)
	if err != nil {
		return err
	}
	cluster := machine.Spec.Cluster
	cn, groups := identity.MachineSubject(machine.Name, string(machine.UID))
	cert, err := c.ca.SignCSR(csr, cn, groups, c.validity)
	if err != nil {
		return c.setPhase(ctx, reg, api.RegistrationPhaseDenied, "InvalidCSR", fmt.Sprintf("the certificate request was refused: %v", err))
	}
	granted := reg.DeepCopy()
	granted.Status.Phase, granted.Status.Reason, granted.Status.Message = api.RegistrationPhaseGranted, "Granted", ""
	granted.Status.Cluster, granted.Status.Machine, granted.Status.Certificate = cluster, machine.Name, cert
	if _, err := c.client.MusterV1alpha1().ClusterRegistrations().UpdateStatus(ctx, granted, metav1.UpdateOptions{}); err != nil {
		return err
	}
	klog.InfoS("Registration granted", "registration", reg.Name, "machine", machine.Name, "cluster", cluster)
	c.ensurePlan(ctx, machine.Name)
	c.bindPassword(ctx, machine.Name)
	c.cleanupSuperseded(ctx, reg)
	c.countUse(ctx, reg.Spec.TokenID)
	return nil
}

// ensureCluster finds the token's cluster, or the agent's own cluster named
// from a hash of its clientID (created on first use).
func (c *Controller) ensureCluster(ctx context.Context, reg *api.ClusterRegistration) (string, error) {
	if reg.Spec.TokenID != "" {
		if tok, err := c.tokens.Get(reg.Spec.TokenID); err == nil && tok.Spec.Cluster != "" {
			return tok.Spec.Cluster, nil
		}
	}
	sum := sha256.Sum256([]byte(reg.Spec.ClientID))
	name := "c-" + hex.EncodeToString(sum[:])[:12]
	cl := &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.ClusterSpec{ClientID: reg.Spec.ClientID}}
	if _, err := c.client.MusterV1alpha1().Clusters().Create(ctx, cl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return name, nil
}

// ensureMachine returns the Machine of the registering node, creating it in
// Registering. The node password was verified when the request was made, so
// an existing Machine of this node name is this node's.
func (c *Controller) ensureMachine(ctx context.Context, reg *api.ClusterRegistration) (*api.Machine, error) {
	machines := c.client.MusterV1alpha1().Machines()
	// The cache answers for the machines that exist; a new node's Machine
	// is created, and a create racing another shows up as AlreadyExists.
	m, err := c.machines.Get(reg.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		cluster, cerr := c.ensureCluster(ctx, reg)
		if cerr != nil {
			return nil, cerr
		}
		m, err = machines.Create(ctx, &api.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: reg.Spec.NodeName, Labels: reg.Spec.Labels},
			Spec:       api.MachineSpec{Cluster: cluster, NodeName: reg.Spec.NodeName, Roles: reg.Spec.Roles, ClientID: reg.Spec.ClientID},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			m, err = machines.Get(ctx, reg.Spec.NodeName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, err
	}
	if m.DeletionTimestamp != nil {
		return nil, fmt.Errorf("machine %s is being deleted; the registration waits until it is gone", m.Name)
	}
	if m.Status.Phase == api.MachinePhasePending {
		name := m.Name
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := machines.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Status.Phase == api.MachinePhasePending {
				cur.Status.Phase, cur.Status.Reason = api.MachinePhaseRegistering, "AgentRegistered"
				if cur, err = machines.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			m = cur
			return nil
		})
	}
	return m, err
}

// cleanupSuperseded deletes this agent's older registrations, so retries
// never pile up (Fleet's orphaned-registration bug). "Older" is one total
// order (creation time, then name) that every grant agrees on, so when
// several requests of one agent are granted at once exactly the newest
// survives instead of each deleting the others.
func (c *Controller) cleanupSuperseded(ctx context.Context, granted *api.ClusterRegistration) {
	all, err := c.registrations.List(labels.Everything())
	if err != nil {
		return
	}
	for _, r := range all {
		if r.Name == granted.Name || r.Spec.ClientID != granted.Spec.ClientID || !olderThan(r, granted) {
			continue
		}
		err := c.client.MusterV1alpha1().ClusterRegistrations().Delete(ctx, r.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.ErrorS(err, "Deleting a superseded registration", "registration", r.Name)
		}
	}
}

func (c *Controller) countUse(_ context.Context, tokenID string) {
	if tokenID == "" {
		return
	}
	c.usesMu.Lock()
	c.uses[tokenID]++
	c.usesMu.Unlock()
}

// flushUses adds the grants counted since the last flush to each token's
// status, one write per token however many agents joined with it.
func (c *Controller) flushUses(ctx context.Context) {
	c.usesMu.Lock()
	pending := c.uses
	c.uses = map[string]int{}
	c.usesMu.Unlock()
	tokens := c.client.MusterV1alpha1().ClusterRegistrationTokens()
	for id, n := range pending {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			t, err := tokens.Get(ctx, id, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			t.Status.Registrations += int32(n)
			t.Status.LastUsed = &now
			_, err = tokens.UpdateStatus(ctx, t, metav1.UpdateOptions{})
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.ErrorS(err, "Recording a join token's use", "token", id)
		}
	}
}

// bindPassword records which Machine owns a node password, so that the
// housekeeper deletes it with the Machine rather than as an orphan.
func (c *Controller) bindPassword(ctx context.Context, node string) {
	passwords := c.client.MusterV1alpha1().NodePasswords()
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		np, err := passwords.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		np.Status.Machine, np.Status.LastVerified = node, &now
		_, err = passwords.UpdateStatus(ctx, np, metav1.UpdateOptions{})
		return err
	})
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

// ensurePlan gives a new machine an empty plan: applying it is how the agent
// shows it is bootstrapped. Operators replace it with real work.
func (c *Controller) ensurePlan(ctx context.Context, machine string) {
	_, err := c.client.MusterV1alpha1().MachinePlans().Create(ctx, &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: machine}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		klog.ErrorS(err, "Creating the initial plan", "machine", machine)
	}
}

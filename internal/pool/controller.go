// Package pool is the MachinePool controller: it keeps each pool's
// replicas of machines the server provisions itself, through a driver
// (internal/driver). It runs on the elected leader only.
//
// Creating a machine is three steps, each safe to repeat after a crash:
// mint a single-use join token bound to the pool's cluster; create the
// Machine reserved for that token (spec.joinToken), so the agent's
// registration binds to it; have the driver make the host, and record the
// driver's state on the Machine. A Machine left without driver state by a
// crash is removed (its host too, by name) and made again, so no host leaks
// and no second Machine appears.
//
// Every pool Machine carries the host finalizer: deleting it (a scale-down,
// a replacement, an operator's kubectl delete, the pool's deletion) holds
// it in Deleting until the driver has removed its host.
package pool

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/driver"
	"github.com/muster-io/muster/internal/install"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/reconcile"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// Finalizer keeps a pool until its machines and their hosts are gone.
const Finalizer = "muster.io/pool-machines"

// tokenTTL bounds a machine's join token: its host must join by then.
const tokenTTL = 15 * time.Minute

// createAttempts is how often a driver's create is tried, with doubling
// backoff from a second, before the machine is Failed.
const createAttempts = 3

// resync reconciles every pool this often besides on every change, so that
// a host that died (process gone) is noticed.
const resync = 5 * time.Second

// Controller reconciles MachinePools.
type Controller struct {
	client    versioned.Interface
	pools     listers.MachinePoolLister
	machines  listers.MachineLister
	drivers   *driver.Registry
	events    record.EventRecorder
	serverURL string
	loop      *reconcile.Loop
	// expect is what this controller did that its cache has not shown
	// yet. Reconciling before the cache catches up would count a Machine
	// just created as missing and make another.
	expect expectations
}

// expectations are the creates and deletes of Machines this controller
// made, by pool, until its informer shows them (the ReplicaSet
// controller's idea). Only the Run goroutine touches them.
type expectations struct {
	created map[string]map[string]time.Time    // pool -> machine name -> when
	deleted map[string]map[types.UID]time.Time // pool -> machine uid -> when
}

// expectationTimeout bounds a wait for the cache: an event lost for good
// must not stall a pool.
const expectationTimeout = 30 * time.Second

func (e *expectations) create(pool, name string) {
	if e.created == nil {
		e.created = map[string]map[string]time.Time{}
	}
	if e.created[pool] == nil {
		e.created[pool] = map[string]time.Time{}
	}
	e.created[pool][name] = time.Now()
}

func (e *expectations) delete(pool string, uid types.UID) {
	if e.deleted == nil {
		e.deleted = map[string]map[types.UID]time.Time{}
	}
	if e.deleted[pool] == nil {
		e.deleted[pool] = map[types.UID]time.Time{}
	}
	e.deleted[pool][uid] = time.Now()
}

// pending drops what ms (the cache's view of pool) now shows, and reports
// whether anything is still to show.
func (e *expectations) pending(pool string, ms []*api.Machine) bool {
	listed := map[string]bool{}
	live := map[types.UID]bool{}
	for _, m := range ms {
		listed[m.Name] = true
		if m.DeletionTimestamp == nil {
			live[m.UID] = true
		}
	}
	waiting := false
	for name, at := range e.created[pool] {
		if listed[name] || time.Since(at) > expectationTimeout {
			delete(e.created[pool], name)
			continue
		}
		waiting = true
	}
	for uid, at := range e.deleted[pool] {
		if !live[uid] || time.Since(at) > expectationTimeout {
			delete(e.deleted[pool], uid)
			continue
		}
		waiting = true
	}
	return waiting
}

// NewController registers its informers with factory.
// events records on Machines what the operator must know.
func NewController(client versioned.Interface, factory informers.SharedInformerFactory, drivers *driver.Registry, events record.EventRecorder, serverURL string) *Controller {
	v := factory.Muster().V1alpha1()
	c := &Controller{client: client, pools: v.MachinePools().Lister(), machines: v.Machines().Lister(), drivers: drivers, events: events, serverURL: serverURL, loop: reconcile.NewLoop()}
	_, _ = v.MachinePools().Informer().AddEventHandler(c.loop.Handler())
	_, _ = v.Machines().Informer().AddEventHandler(c.loop.Handler())
	return c
}

// Run reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.loop.Run(ctx, resync, func(ctx context.Context) {
		pools, err := c.pools.List(labels.Everything())
		if err == nil {
			for _, p := range pools {
				if err := c.reconcile(ctx, p.DeepCopy()); err != nil && ctx.Err() == nil {
					klog.ErrorS(err, "Reconciling machine pool", "pool", p.Name)
					c.setMessage(ctx, p.Name, err.Error())
				}
			}
		}
		c.releaseOrphans(ctx)
	})
}

// Revision is the revision of a pool's template: machines made from
// another are the pool's old ones.
func Revision(t api.MachineTemplate) string { return reconcile.Revision(t) }

func (c *Controller) reconcile(ctx context.Context, p *api.MachinePool) error {
	sel := labels.SelectorFromSet(labels.Set{api.PoolLabel: p.Name})
	ms, err := c.machines.List(sel)
	if err != nil {
		return err
	}
	if p.DeletionTimestamp != nil {
		return c.teardown(ctx, p, ms)
	}
	if c.expect.pending(p.Name, ms) {
		return nil // the informer's event pokes us again
	}
	if !slices.Contains(p.Finalizers, Finalizer) {
		patch := fmt.Sprintf(`{"metadata":{"finalizers":%s}}`, mustJSON(append(p.Finalizers, Finalizer)))
		if _, err := c.client.MusterV1alpha1().MachinePools().Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	d, err := c.drivers.Lookup(p.Spec.Template.Driver)
	if err != nil {
		return err
	}
	var live []*api.Machine
	for _, m := range ms {
		switch {
		case m.DeletionTimestamp != nil:
			// A host that will not go is reported on its Machine; it does
			// not hold up the rest of the pool.
			if err := c.releaseHost(ctx, d, m); err != nil {
				klog.ErrorS(err, "Removing a pool machine's host", "pool", p.Name)
			}
			continue
		case m.Annotations[api.DriverStateAnnotation] == "" && time.Since(m.CreationTimestamp.Time) > 30*time.Second:
			// A crash between creating the Machine and recording its host.
			if err := c.remove(ctx, p, m); err != nil {
				return err
			}
			continue
		}
		live = append(live, m)
	}
	rev := Revision(p.Spec.Template)

	// Remediation first: an unhealthy machine is replaced by the scaling
	// below, unless so many are unhealthy that the fault is likely not
	// theirs (Cluster API's short-circuit).
	if bad := unhealthy(live, p.Spec.Health, time.Now()); len(bad) > 0 {
		// Every machine down counts, not only those past the timeout:
		// machines that failed together pass it one by one. Machines
		// still starting count once past their startup timeout.
		down := 0
		for _, m := range live {
			if m.Status.Phase == api.MachinePhaseUnavailable || m.Status.Phase == api.MachinePhaseFailed || slices.Contains(bad, m) {
				down++
			}
		}
		if max := p.Spec.Health.MaxUnhealthy; max != nil && int32(down) > *max {
			return c.updateStatus(ctx, p.Name, rev, fmt.Sprintf("%d of %d machines are unhealthy, more than maxUnhealthy %d: not replacing them until fewer are (check what they share: the network, the server, the driver)", down, len(live), *max))
		}
		for _, m := range bad {
			klog.InfoS("Replacing an unhealthy pool machine", "pool", p.Name, "machine", m.Name, "phase", m.Status.Phase)
			if err := c.remove(ctx, p, m); err != nil {
				return err
			}
		}
		live = slices.DeleteFunc(live, func(m *api.Machine) bool { return slices.Contains(bad, m) })
	}

	var current, old []*api.Machine
	running := 0
	for _, m := range live {
		if m.Labels[api.PoolRevisionLabel] == rev {
			current = append(current, m)
		} else {
			old = append(old, m)
		}
		if m.Status.Phase == api.MachinePhaseRunning {
			running++
		}
	}
	replicas := int(p.Spec.Replicas)
	if len(old) == 0 {
		for i := len(live); i < replicas; i++ {
			if err := c.create(ctx, d, p, rev); err != nil {
				return err
			}
		}
		if excess := len(live) - replicas; excess > 0 {
			for _, m := range victims(live, excess, p.Spec.DeletePolicy) {
				if err := c.remove(ctx, p, m); err != nil {
					return err
				}
			}
		}
		return c.updateStatus(ctx, p.Name, rev, "")
	}

	// A rolling replacement: new machines up to maxSurge above replicas;
	// an old machine goes only while enough stay Running.
	surge, maxUnavailable := 1, 0
	if v := p.Spec.Strategy.MaxSurge; v != nil {
		surge = int(*v)
	}
	if v := p.Spec.Strategy.MaxUnavailable; v != nil {
		maxUnavailable = int(*v)
	}
	total := len(live)
	for len(current) < replicas && total < replicas+surge {
		if err := c.create(ctx, d, p, rev); err != nil {
			return err
		}
		current = append(current, nil)
		total++
	}
	// Old machines not Running serve nobody: they go first, and freely.
	for _, m := range victims(old, len(old), "Oldest") {
		isRunning := m.Status.Phase == api.MachinePhaseRunning
		if isRunning && running-1 < replicas-maxUnavailable {
			break // wait for a new machine to be Running
		}
		if err := c.remove(ctx, p, m); err != nil {
			return err
		}
		total--
		if isRunning {
			running--
		}
	}
	return c.updateStatus(ctx, p.Name, rev, fmt.Sprintf("rolling to revision %s: %d of %d machines on it", rev, len(current), replicas))
}

// unhealthy returns the machines Unavailable or Failed for longer than the
// pool's unhealthyTimeout, and those whose agent has not checked in within
// its startupTimeout of their creation.
func unhealthy(ms []*api.Machine, h api.MachinePoolHealth, now time.Time) []*api.Machine {
	timeout, startup := 5*time.Minute, 10*time.Minute
	if h.UnhealthyTimeout != nil {
		timeout = h.UnhealthyTimeout.Duration
	}
	if h.StartupTimeout != nil {
		startup = h.StartupTimeout.Duration
	}
	var bad []*api.Machine
	for _, m := range ms {
		switch m.Status.Phase {
		case api.MachinePhaseUnavailable, api.MachinePhaseFailed:
			if timeout <= 0 {
				continue
			}
			since := m.CreationTimestamp.Time
			if n := len(m.Status.Transitions); n > 0 && m.Status.Transitions[n-1].To == string(m.Status.Phase) {
				since = m.Status.Transitions[n-1].Time.Time
			}
			if now.Sub(since) >= timeout {
				bad = append(bad, m)
			}
		case "", api.MachinePhasePending, api.MachinePhaseProvisioning, api.MachinePhaseRegistering:
			if startup > 0 && now.Sub(m.CreationTimestamp.Time) >= startup {
				bad = append(bad, m)
			}
		}
	}
	return bad
}

// victims chooses the machines a scale-down removes: those not Running
// first (they serve nobody), then by the delete policy: Newest (the
// default: the oldest have proven themselves), Oldest or Random; by name
// last so that the choice is stable.
func victims(ms []*api.Machine, n int, policy string) []*api.Machine {
	sorted := slices.Clone(ms)
	if policy == "Random" {
		mrand.Shuffle(len(sorted), func(i, j int) { sorted[i], sorted[j] = sorted[j], sorted[i] })
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		ri, rj := sorted[i].Status.Phase == api.MachinePhaseRunning, sorted[j].Status.Phase == api.MachinePhaseRunning
		if ri != rj {
			return !ri
		}
		if policy == "Random" {
			return false
		}
		ti, tj := createdAt(sorted[i]), createdAt(sorted[j])
		if !ti.Equal(tj) {
			if policy == "Oldest" {
				return ti.Before(tj)
			}
			return tj.Before(ti)
		}
		return sorted[i].Name > sorted[j].Name
	})
	return sorted[:n]
}

// createdAtAnnotation records when the controller made a Machine to the
// nanosecond: creationTimestamp has whole seconds, and a pool makes many
// machines in one, which the delete policy must still tell apart.
const createdAtAnnotation = api.PoolCreatedAtAnnotation

func createdAt(m *api.Machine) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, m.Annotations[createdAtAnnotation]); err == nil {
		return t
	}
	return m.CreationTimestamp.Time
}

func (c *Controller) create(ctx context.Context, d driver.Driver, p *api.MachinePool, rev string) error {
	name := p.Name + "-" + randomSuffix()
	tok, err := jointoken.Create(ctx, c.client.MusterV1alpha1(), jointoken.CreateOptions{
		TTL: tokenTTL, Cluster: p.Spec.Cluster, MaxUses: 1, Description: "machine " + name + " of pool " + p.Name,
	})
	if err != nil {
		return fmt.Errorf("minting the join token of machine %s: %w", name, err)
	}
	lbls := map[string]string{}
	for k, v := range p.Spec.Template.Labels {
		lbls[k] = v
	}
	lbls[api.PoolLabel], lbls[api.PoolRevisionLabel] = p.Name, rev
	config, err := json.Marshal(p.Spec.Template.DriverConfig)
	if err != nil {
		return err
	}
	m := &api.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls, Finalizers: []string{api.MachineHostFinalizer},
			Annotations: map[string]string{api.DriverConfigAnnotation: string(config), createdAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)}},
		Spec: api.MachineSpec{Cluster: p.Spec.Cluster, Driver: p.Spec.Template.Driver, JoinToken: tok.ID, Roles: slices.Clone(p.Spec.Template.Roles)},
	}
	if _, err := c.client.MusterV1alpha1().Machines().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating machine %s: %w", name, err)
	}
	c.expect.create(p.Name, name)
	req := driver.CreateRequest{Name: name, Config: p.Spec.Template.DriverConfig, Bootstrap: driver.Bootstrap{
		ServerURL: c.serverURL, Token: tok.String(),
		// The README's install command: it pins the CA before it trusts
		// install.sh and fails when a download does (curl | sh would not).
		Script: "INSTALL_MUSTER_EXEC='--node-name " + name + "' " + install.Command(c.serverURL, tok.String()),
	}}
	var state driver.State
	for attempt, backoff := 1, time.Second; ; attempt, backoff = attempt+1, backoff*2 {
		if state, err = d.Create(ctx, req); err == nil {
			break
		}
		if attempt == createAttempts {
			return c.failCreate(ctx, d, p, name, err)
		}
		klog.InfoS("A driver could not create a pool machine; retrying", "pool", p.Name, "machine", name, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	encoded, err := driver.EncodeState(state)
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.DriverStateAnnotation, encoded)
	if _, err := c.client.MusterV1alpha1().Machines().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("recording machine %s's driver state: %w", name, err)
	}
	// Pending → Provisioning, unless its agent already registered.
	if cur, err := c.client.MusterV1alpha1().Machines().Get(ctx, name, metav1.GetOptions{}); err == nil {
		if cur.Status.Phase == api.MachinePhasePending {
			cur.Status.Phase, cur.Status.Reason = api.MachinePhaseProvisioning, "DriverCreatedHost"
		}
		setProvisioned(cur, true, "DriverCreatedHost", fmt.Sprintf("driver %s made the host: %s", p.Spec.Template.Driver, encoded))
		_, _ = c.client.MusterV1alpha1().Machines().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	}
	klog.InfoS("Provisioned a pool machine", "pool", p.Name, "machine", name, "driver", p.Spec.Template.Driver)
	return nil
}

// failCreate records a driver's last refusal on the Machine, which is
// Failed from then on with the driver's message; the host is removed by
// name in case the driver made part of it. Remediation replaces the Machine
// after unhealthyTimeout, which paces the next attempts.
func (c *Controller) failCreate(ctx context.Context, d driver.Driver, p *api.MachinePool, name string, cause error) error {
	_ = d.Remove(ctx, driver.HostRequest{Name: name, Config: p.Spec.Template.DriverConfig})
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.DriverStateAnnotation, `{"created":"false"}`)
	if _, err := c.client.MusterV1alpha1().Machines().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	m, err := c.client.MusterV1alpha1().Machines().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	msg := cause.Error()
	if len(msg) > 2048 {
		msg = strings.ToValidUTF8(msg[:2048], "")
	}
	m.Status.Phase, m.Status.Reason, m.Status.Message = api.MachinePhaseFailed, "DriverCreateFailed", msg
	setProvisioned(m, false, "DriverCreateFailed", msg)
	if _, err := c.client.MusterV1alpha1().Machines().UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return fmt.Errorf("machine %s failed after %d attempts: %w", name, createAttempts, cause)
}

// remove deletes a machine; its host goes in releaseHost once the
// lifecycle has drained it, before the Machine itself goes.
func (c *Controller) remove(ctx context.Context, p *api.MachinePool, m *api.Machine) error {
	err := c.client.MusterV1alpha1().Machines().Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting machine %s: %w", m.Name, err)
	}
	if err == nil {
		c.expect.delete(p.Name, m.UID)
	}
	if m.Spec.JoinToken != "" {
		_ = c.client.MusterV1alpha1().ClusterRegistrationTokens().Delete(ctx, m.Spec.JoinToken, metav1.DeleteOptions{})
	}
	klog.InfoS("Removing a pool machine", "pool", p.Name, "machine", m.Name)
	return nil
}

// releaseHost has the driver remove a deleted Machine's host once the
// lifecycle holds it in Deleting, then drops the host finalizer so the
// lifecycle can finish. A driver that fails leaves the Machine in Deleting
// with its reason, and is tried again — unless the driver refuses the
// Machine's config itself (its validate, the check its create makes
// first): that refusal is permanent, so retrying would hold the Machine
// in Deleting forever. Then the Machine goes with a Warning Event that
// says what of the host may be left for the operator to remove by hand.
func (c *Controller) releaseHost(ctx context.Context, d driver.Driver, m *api.Machine) error {
	if m.Status.Phase != api.MachinePhaseDeleting || !slices.Contains(m.Finalizers, api.MachineHostFinalizer) {
		return nil
	}
	state, _ := driver.DecodeState(m.Annotations[api.DriverStateAnnotation])
	var config map[string]string
	_ = json.Unmarshal([]byte(m.Annotations[api.DriverConfigAnnotation]), &config)
	if err := d.Remove(ctx, driver.HostRequest{Name: m.Name, Config: config, State: state}); err != nil {
		var refused *driver.ConfigError
		if verr := c.drivers.Validate(ctx, m.Spec.Driver, config); !errors.As(verr, &refused) {
			msg := fmt.Sprintf("driver %s could not remove the host (retried until it can; the Machine stays until then): %v", m.Spec.Driver, err)
			if len(msg) > 2048 {
				msg = strings.ToValidUTF8(msg[:2048], "")
			}
			if m.Status.Reason != "DriverRemoveFailed" || m.Status.Message != msg {
				next := m.DeepCopy()
				next.Status.Reason, next.Status.Message = "DriverRemoveFailed", msg
				setProvisioned(next, false, "DriverRemoveFailed", msg)
				_, _ = c.client.MusterV1alpha1().Machines().UpdateStatus(ctx, next, metav1.UpdateOptions{})
			}
			return fmt.Errorf("machine %s: %s", m.Name, msg)
		}
		left := "the driver never recorded a host for it"
		if len(state) > 0 && state["created"] != "false" {
			encoded, _ := driver.EncodeState(state)
			left = "the driver recorded the host as " + encoded + ": remove what is left of it there by hand"
		}
		msg := fmt.Sprintf("driver %s refuses this machine's driverConfig (%s), so it cannot remove the host and never will: the Machine goes without it; %s", m.Spec.Driver, refused.Reason, left)
		if len(msg) > 1024 {
			msg = strings.ToValidUTF8(msg[:1024], "")
		}
		c.events.Event(m, corev1.EventTypeWarning, "DriverRefusedConfig", msg)
		klog.InfoS("Releasing a pool machine whose driver refuses its config", "machine", m.Name, "driver", m.Spec.Driver, "removeErr", err, "reason", refused.Reason)
	}
	rest := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == api.MachineHostFinalizer })
	patch := fmt.Sprintf(`{"metadata":{"finalizers":%s,"resourceVersion":%q}}`, mustJSON(rest), m.ResourceVersion)
	if _, err := c.client.MusterV1alpha1().Machines().Patch(ctx, m.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing machine %s after its host was removed: %w", m.Name, err)
	}
	klog.InfoS("Removed a pool machine's host", "machine", m.Name, "driver", m.Spec.Driver)
	return nil
}

// teardown deletes every machine of a deleted pool, and lets the pool go
// once they and their hosts are gone.
func (c *Controller) teardown(ctx context.Context, p *api.MachinePool, ms []*api.Machine) error {
	if !slices.Contains(p.Finalizers, Finalizer) {
		return nil
	}
	d, err := c.drivers.Lookup(p.Spec.Template.Driver)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.DeletionTimestamp == nil {
			err = c.remove(ctx, p, m)
		} else {
			err = c.releaseHost(ctx, d, m)
		}
		if err != nil {
			return err
		}
	}
	if len(ms) > 0 {
		return nil // their deletions poke us again
	}
	rest := slices.DeleteFunc(slices.Clone(p.Finalizers), func(f string) bool { return f == Finalizer })
	patch := fmt.Sprintf(`{"metadata":{"finalizers":%s,"resourceVersion":%q}}`, mustJSON(rest), p.ResourceVersion)
	_, err = c.client.MusterV1alpha1().MachinePools().Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// releaseOrphans removes the hosts of deleted pool Machines whose pool is
// gone (its finalizer removed by hand): nothing else would.
func (c *Controller) releaseOrphans(ctx context.Context) {
	ms, err := c.machines.List(labels.Everything())
	if err != nil {
		return
	}
	for _, m := range ms {
		if m.DeletionTimestamp == nil || m.Labels[api.PoolLabel] == "" || !slices.Contains(m.Finalizers, api.MachineHostFinalizer) {
			continue
		}
		if _, err := c.pools.Get(m.Labels[api.PoolLabel]); !apierrors.IsNotFound(err) {
			continue
		}
		d, err := c.drivers.Lookup(m.Spec.Driver)
		if err == nil {
			err = c.releaseHost(ctx, d, m.DeepCopy())
		}
		if err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Removing the host of a machine whose pool is gone", "machine", m.Name)
		}
	}
}

func (c *Controller) updateStatus(ctx context.Context, name, rev, message string) error {
	p, err := c.client.MusterV1alpha1().MachinePools().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ms, err := c.machines.List(labels.SelectorFromSet(labels.Set{api.PoolLabel: name}))
	if err != nil {
		return err
	}
	st := api.MachinePoolStatus{Revision: rev, ObservedGeneration: p.Generation, Message: message}
	for _, m := range ms {
		if m.DeletionTimestamp != nil {
			continue
		}
		if st.Message == "" && m.Status.Phase == api.MachinePhaseFailed {
			st.Message = fmt.Sprintf("machine %s is Failed (%s): %s", m.Name, m.Status.Reason, m.Status.Message)
			if len(st.Message) > 1024 {
				st.Message = strings.ToValidUTF8(st.Message[:1024], "")
			}
		}
		st.Replicas++
		if m.Status.Phase == api.MachinePhaseRunning {
			st.ReadyReplicas++
		}
		if m.Labels[api.PoolRevisionLabel] == rev {
			st.UpdatedReplicas++
		}
	}
	if st.Replicas == p.Status.Replicas && st.ReadyReplicas == p.Status.ReadyReplicas && st.UpdatedReplicas == p.Status.UpdatedReplicas && st.Revision == p.Status.Revision &&
		st.Message == p.Status.Message && st.ObservedGeneration == p.Status.ObservedGeneration {
		return nil
	}
	p.Status = st
	_, err = c.client.MusterV1alpha1().MachinePools().UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func (c *Controller) setMessage(ctx context.Context, name, msg string) {
	p, err := c.client.MusterV1alpha1().MachinePools().Get(ctx, name, metav1.GetOptions{})
	if err != nil || p.Status.Message == msg {
		return
	}
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	p.Status.Message = msg
	_, _ = c.client.MusterV1alpha1().MachinePools().UpdateStatus(ctx, p, metav1.UpdateOptions{})
}

// ProvisionedCondition on a pool's Machine says what its driver last did
// with the host, in the driver's own words.
const ProvisionedCondition = "Provisioned"

// setProvisioned records the driver's outcome on m's status (not written).
func setProvisioned(m *api.Machine, ok bool, reason, msg string) {
	if len(msg) > 1024 {
		msg = strings.ToValidUTF8(msg[:1024], "")
	}
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: ProvisionedCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: m.Generation})
}

func randomSuffix() string {
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	var s strings.Builder
	for _, x := range b {
		s.WriteByte(letters[int(x)%len(letters)])
	}
	return s.String()
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

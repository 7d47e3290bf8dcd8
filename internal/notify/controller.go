// Package notify tells the outside world of the fleet's troubles: it sends
// the transitions each NotificationSubscription chooses (a Machine Failed
// or Unavailable, a rollout paused or reverted, a registration waiting for
// approval, a pool short of replicas) to its HTTPS receiver as signed
// CloudEvents. It runs on the controller leader, off the API's write path:
// the informers' handlers only queue, each subscription's own goroutine
// delivers, in order, retrying with backoff, its queue bounded.
package notify

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// Defaults of Config.
const (
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	// statusInterval is how often changed delivery counts are written to
	// the subscriptions' status: every delivery would be a datastore write.
	statusInterval = 5 * time.Second
)

// Config is what the controller needs.
type Config struct {
	Client  versioned.Interface
	Factory informers.SharedInformerFactory
	Events  record.EventRecorder
	// Source is the CloudEvents source of every event: this deployment's URL.
	Source string
	// InitialBackoff and MaxBackoff bound the waits between retries of a
	// delivery the receiver failed (zero: the defaults).
	InitialBackoff, MaxBackoff time.Duration
	// Destinations is where events may go: loopback, link-local and the
	// like only where allowed.
	Destinations Destinations
}

// Controller is the notifier of one leader's term.
type Controller struct {
	cfg  Config
	subs listers.NotificationSubscriptionLister

	mu      sync.Mutex
	running map[string]*running
	ctx     context.Context // set by Run; nil before it and after it ended
	pending []Event         // transitions seen before Run, sent once it starts

	handlers []func()
}

type running struct {
	sub    *subscriber
	uid    string
	cancel context.CancelFunc
}

// NewController registers the controller's handlers on the factory's
// informers; nothing is sent until Run.
func NewController(cfg Config) *Controller {
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	v := cfg.Factory.Muster().V1alpha1()
	c := &Controller{cfg: cfg, subs: v.NotificationSubscriptions().Lister(), running: map[string]*running{}}
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) {
		reg, err := inf.AddEventHandler(h)
		if err == nil {
			c.handlers = append(c.handlers, func() { _ = inf.RemoveEventHandler(reg) })
		}
	}
	add(v.Machines().Informer(), transitionHandler(c, machineTransitions))
	add(v.ClusterRegistrations().Informer(), transitionHandler(c, registrationTransitions))
	add(v.MachinePlanSets().Informer(), transitionHandler(c, planSetTransitions))
	add(v.MachinePools().Informer(), transitionHandler(c, poolTransitions))
	add(v.NotificationSubscriptions().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.configure(obj) },
		UpdateFunc: func(_, obj interface{}) { c.configure(obj) },
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*api.NotificationSubscription); ok {
				c.remove(s.Name)
			}
		},
	})
	return c
}

// transitionHandler calls detect on every change of a kind's objects. The
// objects already there when the informer starts are not transitions (a
// new leader would otherwise repeat every Failed machine of the fleet):
// only changes after the initial list are.
func transitionHandler[T any](c *Controller, detect func(old, obj *T) []Event) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj interface{}, initial bool) {
			if o, ok := obj.(*T); ok && !initial {
				c.publish(detect(nil, o))
			}
		},
		UpdateFunc: func(oldObj, obj interface{}) {
			old, ok1 := oldObj.(*T)
			o, ok2 := obj.(*T)
			if ok1 && ok2 {
				c.publish(detect(old, o))
			}
		},
	}
}

// publish queues events for every subscription that chose them. It runs
// in the informers' handlers, so it only appends to in-memory queues.
func (c *Controller) publish(events []Event) {
	if len(events) == 0 {
		return
	}
	now := time.Now()
	for i := range events {
		events[i].Time = now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		if len(c.pending) < api.MaxNotificationQueue {
			c.pending = append(c.pending, events...)
		}
		return
	}
	c.deliverLocked(events)
}

func (c *Controller) deliverLocked(events []Event) {
	subs, err := c.subs.List(labelsEverything)
	if err != nil {
		return
	}
	for _, s := range subs {
		for _, e := range events {
			if !chose(s, e.Kind) {
				continue
			}
			r := c.ensureLocked(s)
			if r != nil {
				r.sub.add(e)
			}
		}
	}
}

func chose(s *api.NotificationSubscription, k api.NotificationEvent) bool {
	for _, e := range s.Spec.Events {
		if e == k {
			return true
		}
	}
	return false
}

func (c *Controller) configure(obj interface{}) {
	s, ok := obj.(*api.NotificationSubscription)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx != nil {
		c.ensureLocked(s)
	}
}

// ensureLocked returns the subscription's running subscriber, started or
// reconfigured from its spec.
func (c *Controller) ensureLocked(s *api.NotificationSubscription) *running {
	r := c.running[s.Name]
	if r != nil && r.uid != string(s.UID) {
		// Deleted and created again under the same name: a new queue.
		r.cancel()
		delete(c.running, s.Name)
		r = nil
	}
	if r == nil {
		sub := newSubscriber(s.Name, c.cfg.Source, c, c.cfg.Destinations, c.cfg.InitialBackoff, c.cfg.MaxBackoff)
		ctx, cancel := context.WithCancel(c.ctx)
		r = &running{sub: sub, uid: string(s.UID), cancel: cancel}
		if err := sub.configure(s.Spec); err != nil {
			cancel()
			c.cfg.Events.Eventf(s, corev1.EventTypeWarning, "SubscriptionInvalid", "%v: fix the subscription; nothing is sent until then", err)
			return nil
		}
		c.running[s.Name] = r
		go sub.run(ctx)
		return r
	}
	if err := r.sub.configure(s.Spec); err != nil {
		c.cfg.Events.Eventf(s, corev1.EventTypeWarning, "SubscriptionInvalid", "%v: the previous URL and key stay in use until it is fixed", err)
	}
	return r
}

func (c *Controller) remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.running[name]; r != nil {
		r.cancel()
		delete(c.running, name)
		forget(name)
	}
}

// Run delivers until ctx (the leader's term) ends; what is still queued
// then is lost with the term (the next leader tells of the transitions it
// sees, not of those before it).
func (c *Controller) Run(ctx context.Context) {
	defer func() {
		for _, remove := range c.handlers {
			remove()
		}
		c.mu.Lock()
		for name, r := range c.running {
			r.cancel()
			forget(name)
		}
		c.running, c.ctx = map[string]*running{}, nil
		c.mu.Unlock()
	}()
	inf := c.cfg.Factory.Muster().V1alpha1().NotificationSubscriptions().Informer()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	c.mu.Lock()
	c.ctx = ctx
	subs, _ := c.subs.List(labelsEverything)
	for _, s := range subs {
		c.ensureLocked(s)
	}
	c.deliverLocked(c.pending)
	c.pending = nil
	c.mu.Unlock()

	t := time.NewTicker(statusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.writeStatus(ctx)
		}
	}
}

// writeStatus writes the changed subscriptions' delivery counts.
func (c *Controller) writeStatus(ctx context.Context) {
	c.mu.Lock()
	subs := make(map[string]*subscriber, len(c.running))
	for name, r := range c.running {
		subs[name] = r.sub
	}
	c.mu.Unlock()
	for name, sub := range subs {
		st, changed := sub.snapshot()
		if !changed {
			continue
		}
		cur, err := c.subs.Get(name)
		if err != nil {
			continue
		}
		obj := cur.DeepCopy()
		obj.Status = st
		if _, err := c.cfg.Client.MusterV1alpha1().NotificationSubscriptions().UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsNotFound(err) && ctx.Err() == nil {
				klog.V(2).InfoS("Writing a notification subscription's status failed; retried with the next counts", "subscription", name, "err", err.Error())
			}
			sub.mu.Lock()
			sub.changed = true
			sub.mu.Unlock()
		}
	}
}

// The observer: metrics, and an Event on the subscription when its queue
// overflows (once per episode) .

func (c *Controller) queueLength(sub string, n, limit int) { setQueue(sub, n, limit) }

func (c *Controller) dropped(sub string, first bool) {
	countDropped(sub)
	if !first {
		return
	}
	if s, err := c.subs.Get(sub); err == nil {
		c.cfg.Events.Eventf(s, corev1.EventTypeWarning, "NotificationsDropped",
			"the queue of events for %s is full (spec.maxQueued %d): the oldest are dropped until the receiver takes them again (see status.lastError, muster_notifications_dropped_total)",
			s.Spec.URL, s.Spec.MaxQueued)
	}
}

func (c *Controller) delivered(sub string, latency time.Duration) { countDelivered(sub, latency) }

func (c *Controller) failed(sub string, err error) {
	countFailed(sub)
	klog.V(2).InfoS("Notification delivery failed; retrying with backoff", "subscription", sub, "err", err.Error())
}

// Package leader elects the one muster-server that runs the controllers.
//
// kine implements neither etcd leases nor elections, so the election runs
// on a ControllerLease object through the API, with client-go's leader
// elector: the holder renews the lease by compare-and-swap on its
// resourceVersion, and any other server takes it over once it has watched
// the lease stay unchanged for LeaseDuration. Expiry is judged on each
// server's own clock from when it last saw the lease change, so clock skew
// between servers does not matter.
package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/metrics"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// Timing of the election. A dead leader's lease is taken over between
// LeaseDuration and LeaseDuration+RetryPeriod after its last renewal
// (12 s at most); a leader that cannot renew for RenewDeadline steps down
// before anyone else may take over.
const (
	LeaseDuration = 10 * time.Second
	RenewDeadline = 7 * time.Second
	RetryPeriod   = 2 * time.Second
)

// Config says which lease to hold, as whom, and what to run while holding it.
type Config struct {
	Client versioned.Interface
	// Lease is the ControllerLease's name.
	Lease string
	// Identity is this server's name, unique among the servers.
	Identity string
	// Run is called each time this server becomes the leader; its context
	// ends when leadership is lost or the server stops.
	Run func(ctx context.Context)
	// OnNewLeader is told the holder's identity whenever it changes. Optional.
	OnNewLeader func(identity string)
}

// Run takes part in the election until ctx ends. Losing the lease ends the
// term's context and enters the election again, so a server that lost it
// in a datastore outage becomes a candidate once the outage is over.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Identity == "" || cfg.Lease == "" || cfg.Run == nil {
		return errors.New("leader: Lease, Identity and Run are required")
	}
	lock := &leaseLock{client: cfg.Client, name: cfg.Lease, identity: cfg.Identity}
	metrics.Leading(cfg.Lease, false)
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: LeaseDuration,
			RenewDeadline: RenewDeadline,
			RetryPeriod:   RetryPeriod,
			// A clean shutdown hands the lease over at once instead of
			// making the others wait out LeaseDuration.
			ReleaseOnCancel: true,
			Name:            cfg.Lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(term context.Context) {
					klog.InfoS("Became the controller leader", "lease", cfg.Lease, "identity", cfg.Identity)
					metrics.Leading(cfg.Lease, true)
					cfg.Run(term)
				},
				OnStoppedLeading: func() {
					metrics.Leading(cfg.Lease, false)
					klog.InfoS("No longer the controller leader", "lease", cfg.Lease, "identity", cfg.Identity)
				},
				OnNewLeader: func(holder string) {
					if cfg.OnNewLeader != nil {
						cfg.OnNewLeader(holder)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election on %s: %w", cfg.Lease, err)
		}
		elector.Run(ctx)
	}
	return nil
}

// leaseLock is client-go's resourcelock.Interface on a ControllerLease.
// Update is a compare-and-swap on the resourceVersion last read, so two
// servers can never both renew the same observed lease.
type leaseLock struct {
	client   versioned.Interface
	name     string
	identity string

	mu   sync.Mutex
	last *api.ControllerLease
}

var _ resourcelock.Interface = &leaseLock{}

func (l *leaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	lease, err := l.client.MusterV1alpha1().ControllerLeases().Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.remember(lease)
	record := toRecord(lease.Spec)
	// The elector compares these bytes to notice a renewal it did not make.
	raw := fmt.Sprintf("%s/%s", lease.ResourceVersion, record.HolderIdentity)
	return &record, []byte(raw), nil
}

func (l *leaseLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	lease, err := l.client.MusterV1alpha1().ControllerLeases().Create(ctx, &api.ControllerLease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name},
		Spec:       toSpec(r),
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.remember(lease)
	return nil
}

func (l *leaseLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	last := l.last
	l.mu.Unlock()
	if last == nil {
		return apierrors.NewConflict(api.Resource("controllerleases"), l.name, errors.New("lease not read yet"))
	}
	next := last.DeepCopy()
	next.Spec = toSpec(r)
	lease, err := l.client.MusterV1alpha1().ControllerLeases().Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.remember(lease)
	return nil
}

func (l *leaseLock) remember(lease *api.ControllerLease) {
	l.mu.Lock()
	l.last = lease
	l.mu.Unlock()
}

func (l *leaseLock) RecordEvent(string) {}
func (l *leaseLock) Identity() string   { return l.identity }
func (l *leaseLock) Describe() string   { return "controllerleases/" + l.name }

func toRecord(s api.ControllerLeaseSpec) resourcelock.LeaderElectionRecord {
	r := resourcelock.LeaderElectionRecord{
		HolderIdentity:       s.HolderIdentity,
		LeaseDurationSeconds: int(s.LeaseDurationSeconds),
		LeaderTransitions:    int(s.LeaseTransitions),
	}
	if s.AcquireTime != nil {
		r.AcquireTime = metav1.Time{Time: s.AcquireTime.Time}
	}
	if s.RenewTime != nil {
		r.RenewTime = metav1.Time{Time: s.RenewTime.Time}
	}
	return r
}

func toSpec(r resourcelock.LeaderElectionRecord) api.ControllerLeaseSpec {
	acquire := metav1.NewMicroTime(r.AcquireTime.Time)
	renew := metav1.NewMicroTime(r.RenewTime.Time)
	return api.ControllerLeaseSpec{
		HolderIdentity:       r.HolderIdentity,
		LeaseDurationSeconds: int32(r.LeaseDurationSeconds),
		AcquireTime:          &acquire,
		RenewTime:            &renew,
		LeaseTransitions:     int32(r.LeaderTransitions),
	}
}

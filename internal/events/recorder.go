package events

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	clientscheme "github.com/muster-io/muster/pkg/client/clientset/versioned/scheme"
)

// Component is the source the server's events are recorded under.
const Component = "muster-server"

// The spam filter's budget, per reason, across all objects. client-go's
// default budget is per object, which bounds a flapping machine but not a
// fleet: 5,000 agents joining at once would each earn a Registered event,
// a few transitions, and the datastore writes to go with them, while the
// datastore is busiest. Keyed by reason, a storm records the first
// spamBurst events of each reason and then spamQPS a second; the rest
// are in the server's log only.
const (
	spamBurst = 50
	spamQPS   = 2
	// writeQPS and writeBurst bound the writes of whatever passes the
	// filter; past them the recorder's queue (1,000) fills and drops.
	writeQPS   = 20
	writeBurst = 50
)

// Recorder records events for one server. It can be handed to the
// controllers before the API serves; events recorded before Start are dropped.
type Recorder struct {
	record.EventRecorder
	broadcaster record.EventBroadcaster
}

// NewRecorder returns a recorder whose events name host, this server.
func NewRecorder(host string) *Recorder {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: spamBurst, QPS: spamQPS, SpamKeyFunc: spamKey,
	}))
	return &Recorder{
		EventRecorder: b.NewRecorder(clientscheme.Scheme, corev1.EventSource{Component: Component, Host: host}),
		broadcaster:   b,
	}
}

// spamKey groups events by what happened, not to which object.
func spamKey(e *corev1.Event) string {
	return strings.Join([]string{e.Source.Component, e.InvolvedObject.Kind, e.Type, e.Reason}, "/")
}

// Start writes the recorded events through cfg (the server's loopback
// client) until ctx ends.
func (r *Recorder) Start(ctx context.Context, cfg *rest.Config) error {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = writeQPS, writeBurst
	client, err := typedcorev1.NewForConfig(c)
	if err != nil {
		return err
	}
	w := r.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.Events("")})
	go func() {
		<-ctx.Done()
		w.Stop()
	}()
	return nil
}

// Discard is a recorder that records nothing, for code run without a server.
var Discard record.EventRecorder = &record.FakeRecorder{}

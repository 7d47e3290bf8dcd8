package notify

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	compbase "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var labelsEverything = labels.Everything()

// The notifier's metrics, one series per subscription (subscriptions are
// written by operators, so their names are a small, chosen set).
var (
	queueLength = compbase.NewGaugeVec(&compbase.GaugeOpts{
		Namespace: "muster", Name: "notification_queue_length",
		Help:           "Events waiting for a notification subscription's receiver, on the controller leader.",
		StabilityLevel: compbase.ALPHA,
	}, []string{"subscription"})
	queueCapacity = compbase.NewGaugeVec(&compbase.GaugeOpts{
		Namespace: "muster", Name: "notification_queue_capacity",
		Help:           "The bound of a notification subscription's queue (spec.maxQueued): past it the oldest event is dropped.",
		StabilityLevel: compbase.ALPHA,
	}, []string{"subscription"})
	droppedTotal = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: "muster", Name: "notifications_dropped_total",
		Help:           "Events dropped from a full notification queue.",
		StabilityLevel: compbase.ALPHA,
	}, []string{"subscription"})
	deliveredTotal = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: "muster", Name: "notifications_delivered_total",
		Help:           "Events a notification subscription's receiver accepted (2xx).",
		StabilityLevel: compbase.ALPHA,
	}, []string{"subscription"})
	failuresTotal = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: "muster", Name: "notification_delivery_failures_total",
		Help:           "Deliveries that failed (no connection, TLS, timeout, non-2xx) and are retried with backoff.",
		StabilityLevel: compbase.ALPHA,
	}, []string{"subscription"})
	deliverySeconds = compbase.NewHistogram(&compbase.HistogramOpts{
		Namespace: "muster", Name: "notification_delivery_seconds",
		Help:           "Time from a transition being seen to its receiver accepting it, retries included.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		StabilityLevel: compbase.ALPHA,
	})
	registerOnce sync.Once
)

// RegisterMetrics adds the notifier's metrics to the server's /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(queueLength, queueCapacity, droppedTotal, deliveredTotal, failuresTotal, deliverySeconds)
	})
}

func setQueue(sub string, n, limit int) {
	queueLength.WithLabelValues(sub).Set(float64(n))
	queueCapacity.WithLabelValues(sub).Set(float64(limit))
}

func countDropped(sub string) { droppedTotal.WithLabelValues(sub).Inc() }

func countDelivered(sub string, latency time.Duration) {
	deliveredTotal.WithLabelValues(sub).Inc()
	deliverySeconds.Observe(latency.Seconds())
}

func countFailed(sub string) { failuresTotal.WithLabelValues(sub).Inc() }

// forget drops a subscription's series once it is gone or the term ended.
func forget(sub string) {
	for _, v := range []*compbase.GaugeVec{queueLength, queueCapacity} {
		v.DeleteLabelValues(sub)
	}
}

package registry

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// NotificationSubscription is the storage description of notification
// subscriptions (internal/notify delivers them).
var NotificationSubscription = Kind[*api.NotificationSubscription]{
	Resource:       "notificationsubscriptions",
	Singular:       "notificationsubscription",
	ShortNames:     []string{"nsub"},
	New:            func() *api.NotificationSubscription { return &api.NotificationSubscription{} },
	NewList:        func() runtime.Object { return &api.NotificationSubscriptionList{} },
	Fields:         api.NotificationSubscriptionFields,
	Validate:       validation.ValidateNotificationSubscription,
	ValidateStatus: validation.ValidateNotificationSubscriptionStatusUpdate,
	Columns: []metav1.TableColumnDefinition{
		{Name: "URL", Type: "string", Description: "Where events are sent."},
		{Name: "Events", Type: "string", Description: "Transitions sent."},
		{Name: "Delivered", Type: "integer", Description: "Events the receiver accepted."},
		{Name: "Queued", Type: "integer", Description: "Events waiting for the receiver."},
		{Name: "Dropped", Type: "integer", Description: "Events dropped from a full queue."},
	},
	Cells: func(s *api.NotificationSubscription) []interface{} {
		ev := make([]string, len(s.Spec.Events))
		for i, e := range s.Spec.Events {
			ev[i] = string(e)
		}
		return []interface{}{s.Spec.URL, strings.Join(ev, ","), s.Status.Delivered, s.Status.Queued, s.Status.Dropped}
	},
}

package validation

import (
	"strings"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestValidateNotificationSubscription: events go only over https, signed
// with a key worth the name; a viewer's "<redacted>" cannot be written back
// as the key; the queue (server memory) is bounded.
func TestValidateNotificationSubscription(t *testing.T) {
	key := strings.Repeat("k", 32)
	for _, tc := range []struct {
		name   string
		mutate func(*api.NotificationSubscriptionSpec)
		want   string // "" for valid
	}{
		{"valid", func(*api.NotificationSubscriptionSpec) {}, ""},
		{"plain http", func(s *api.NotificationSubscriptionSpec) { s.URL = "http://hooks.example.com/x" }, "spec.url"},
		{"credentials in the URL", func(s *api.NotificationSubscriptionSpec) { s.URL = "https://u:p@hooks.example.com/x" }, "no user:password"},
		{"no URL", func(s *api.NotificationSubscriptionSpec) { s.URL = "" }, "spec.url: Required"},
		{"no events", func(s *api.NotificationSubscriptionSpec) { s.Events = nil }, "spec.events: Required"},
		{"unknown event", func(s *api.NotificationSubscriptionSpec) { s.Events = []api.NotificationEvent{"MachineHappy"} }, "spec.events[0]: Unsupported value"},
		{"repeated event", func(s *api.NotificationSubscriptionSpec) {
			s.Events = []api.NotificationEvent{api.NotifyPoolShort, api.NotifyPoolShort}
		}, "spec.events[1]: Duplicate"},
		{"short key", func(s *api.NotificationSubscriptionSpec) { s.SigningKey = "secret" }, "at least 32 characters"},
		{"the redaction marker as key", func(s *api.NotificationSubscriptionSpec) { s.SigningKey = api.Redacted }, "write the real key"},
		{"queue too long", func(s *api.NotificationSubscriptionSpec) { s.MaxQueued = api.MaxNotificationQueue + 1 }, "spec.maxQueued"},
		{"not a CA", func(s *api.NotificationSubscriptionSpec) { s.CABundle = "hello" }, "spec.caBundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &api.NotificationSubscription{Spec: api.NotificationSubscriptionSpec{URL: "https://hooks.example.com/muster",
				Events: []api.NotificationEvent{api.NotifyMachineFailed}, SigningKey: key}}
			tc.mutate(&s.Spec)
			errs := ValidateNotificationSubscription(s).ToAggregate()
			switch {
			case tc.want == "" && errs != nil:
				t.Errorf("refused: %v", errs)
			case tc.want != "" && (errs == nil || !strings.Contains(errs.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", errs, tc.want)
			}
			if errs != nil && strings.Contains(errs.Error(), key) {
				t.Errorf("the error quotes the signing key: %v", errs)
			}
		})
	}
}

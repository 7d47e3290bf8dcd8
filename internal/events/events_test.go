package events

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

func event(name, kind, object, reason string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Name: object, APIVersion: "muster.io/v1alpha1"},
		Reason:         reason, Type: corev1.EventTypeNormal, Message: "m",
		Source: corev1.EventSource{Component: Component, Host: "s1"},
	}
}

// The selectors `kubectl describe` sends (name, namespace, kind, uid of the
// involved object) are served, and field labels the server does not know
// are refused with the ones it does.
func TestFieldSelectors(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	e := event("m1.1", "Machine", "m1", "Registered")
	tests := []struct {
		selector string
		match    bool
	}{
		{"involvedObject.name=m1", true},
		{"involvedObject.name=m2", false},
		{"involvedObject.name=m1,involvedObject.namespace=,involvedObject.kind=Machine", true},
		{"involvedObject.kind=ClusterRegistration", false},
		{"reason=Registered,type=Normal,source=muster-server", true},
	}
	for _, tt := range tests {
		sel, err := fields.ParseSelector(tt.selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range sel.Requirements() {
			if _, _, err := scheme.ConvertFieldLabel(corev1.SchemeGroupVersion.WithKind("Event"), r.Field, r.Value); err != nil {
				t.Errorf("%s: %v", tt.selector, err)
			}
		}
		if got := sel.Matches(Fields(e)); got != tt.match {
			t.Errorf("%s matches = %v, want %v", tt.selector, got, tt.match)
		}
	}
	if _, _, err := scheme.ConvertFieldLabel(corev1.SchemeGroupVersion.WithKind("Event"), "spec.nodeName", "x"); err == nil || !strings.Contains(err.Error(), "involvedObject.name") {
		t.Errorf("an unknown field label: %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*corev1.Event)
		want   string
	}{
		{"a recorder's event", func(*corev1.Event) {}, ""},
		{"no involved object", func(e *corev1.Event) { e.InvolvedObject = corev1.ObjectReference{} }, "involvedObject.kind"},
		{"another namespace's object", func(e *corev1.Event) { e.InvolvedObject.Namespace = "kube-system" }, "involvedObject.namespace"},
		{"an unknown type", func(e *corev1.Event) { e.Type = "Critical" }, "type"},
		{"a huge message", func(e *corev1.Event) { e.Message = strings.Repeat("x", maxMessageBytes+1) }, "message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := event("m1.1", "Machine", "m1", "Registered")
			tt.change(e)
			errs := validate(e)
			if got := errs.ToAggregate(); (tt.want == "") != (got == nil) || (got != nil && !strings.Contains(got.Error(), tt.want)) {
				t.Errorf("validate: %v, want %q", got, tt.want)
			}
		})
	}
}

func TestTable(t *testing.T) {
	list := &corev1.EventList{Items: []corev1.Event{*event("m1.1", "Machine", "m1", "Registered")}}
	tab, err := table{}.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != 1 || tab.Rows[0].Cells[2] != "Registered" || tab.Rows[0].Cells[3] != "machine/m1" || len(tab.Rows[0].Cells) != len(columns) {
		t.Errorf("row: %v", tab.Rows)
	}
}

// The spam filter is keyed by reason, not by object: a storm of one reason
// across many machines passes the burst and is then dropped, while another
// reason still has its own budget.
func TestSpamFilterBoundsAStormAcrossObjects(t *testing.T) {
	c := record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{BurstSize: spamBurst, QPS: spamQPS, SpamKeyFunc: spamKey})
	passed := 0
	for i := 0; i < 1000; i++ {
		res, err := c.EventCorrelate(event(fmt.Sprintf("m%d.1", i), "Machine", fmt.Sprintf("m%d", i), "Registered"))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Skip {
			passed++
		}
	}
	// The test runs in well under a second: at most one refill.
	if passed < spamBurst || passed > spamBurst+spamQPS {
		t.Errorf("%d of 1000 Registered events passed, want the burst of %d", passed, spamBurst)
	}
	if res, _ := c.EventCorrelate(event("x.1", "Machine", "x", "AgentSilent")); res.Skip {
		t.Error("another reason was dropped with the storm's")
	}
}

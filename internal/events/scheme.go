// Package events serves and records core/v1 Events, the way Kubernetes
// shows what happened to an object: `kubectl get events` and the Events
// section of `kubectl describe` read them. Muster serves the legacy core
// group with this one resource (storage.go) on the same datastore as its
// own kinds, kept for a bounded time, and its controllers record through
// client-go's recorder with a spam filter that bounds what a registration
// storm writes (recorder.go).
package events

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Namespace is where the events about muster's kinds go. Every muster kind
// is cluster-scoped; Kubernetes files the events of cluster-scoped objects
// (Nodes) in "default", and so does client-go's recorder.
const Namespace = "default"

// AddToScheme registers Event and EventList as core/v1, and the field
// selectors kubectl uses on them.
func AddToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Event{}, &corev1.EventList{})
	return scheme.AddFieldLabelConversionFunc(corev1.SchemeGroupVersion.WithKind("Event"), func(label, value string) (string, string, error) {
		if _, ok := Fields(&corev1.Event{})[label]; ok {
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label %q is not supported for events; use one of involvedObject.kind, involvedObject.name, involvedObject.namespace, involvedObject.uid, reason, type, source", label)
	})
}

// AddToSchemeAsInternal registers the same Go types as the core group's
// internal version, as muster does for its own kinds: one type, no conversions.
func AddToSchemeAsInternal(scheme *runtime.Scheme) error {
	internal := schema.GroupVersion{Group: corev1.GroupName, Version: runtime.APIVersionInternal}
	scheme.AddKnownTypes(internal, &corev1.Event{}, &corev1.EventList{})
	return nil
}

// Fields are the fields an Event can be selected by: the ones
// kube-apiserver offers, which `kubectl describe` and
// `kubectl get events --field-selector` use.
func Fields(e *corev1.Event) fields.Set {
	source := e.Source.Component
	if source == "" {
		source = e.ReportingController
	}
	return fields.Set{
		"metadata.name":                  e.Name,
		"metadata.namespace":             e.Namespace,
		"involvedObject.kind":            e.InvolvedObject.Kind,
		"involvedObject.namespace":       e.InvolvedObject.Namespace,
		"involvedObject.name":            e.InvolvedObject.Name,
		"involvedObject.uid":             string(e.InvolvedObject.UID),
		"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
		"reason":                         e.Reason,
		"reportingComponent":             e.ReportingController,
		"source":                         source,
		"type":                           e.Type,
	}
}

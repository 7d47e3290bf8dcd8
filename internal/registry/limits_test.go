package registry

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestObjectSizeLimit: the storage codec refuses, with 413 naming the
// limit, any object that would take more than MaxObjectBytes in the
// datastore, whatever the kind and however it is written.
func TestObjectSizeLimit(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := api.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	codec := LimitObjectSize(serializer.NewCodecFactory(scheme).LegacyCodec(api.SchemeGroupVersion))
	for _, tc := range []struct {
		name    string
		obj     runtime.Object
		refused bool
	}{
		{"small machine", &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m"}}, false},
		{"token with a 1 MiB description", &api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "abcdef"},
			Spec: api.ClusterRegistrationTokenSpec{Description: strings.Repeat("x", MaxObjectBytes)}}, true},
		{"machine with 1.5 MiB of annotations", &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "big",
			Annotations: map[string]string{"a": strings.Repeat("x", 1536<<10)}}}, true},
		{"plan just under the limit", &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: api.MachinePlanSpec{Files: []api.PlanFile{{Path: "/f", Content: strings.Repeat("x", MaxObjectBytes-300)}}}}, false},
		// Stored before the bound: its finalizer must still come off.
		{"oversized machine being deleted", &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "old", DeletionTimestamp: &now},
			Status: api.MachineStatus{Message: strings.Repeat("x", 1536<<10)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := codec.Encode(tc.obj, &buf)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsRequestEntityTooLargeError(err) || apierrors.ReasonForError(err) != metav1.StatusReasonRequestEntityTooLarge {
				t.Fatalf("err = %v, want 413", err)
			}
			if code := err.(apierrors.APIStatus).Status().Code; code != http.StatusRequestEntityTooLarge {
				t.Errorf("code %d, want 413", code)
			}
			if !strings.Contains(err.Error(), "at most 1048576 (1 MiB)") {
				t.Errorf("the message does not name the limit: %v", err)
			}
		})
	}
}

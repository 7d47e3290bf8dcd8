// Package printer writes API lists as `kubectl get -o json|yaml` does: a
// v1 List whose items carry their apiVersion and kind, so that the output
// can be fed back to kubectl.
package printer

import (
	"encoding/json"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// List writes list, whose items are of kind, as format ("json" or "yaml").
func List(w io.Writer, list runtime.Object, kind, format string) error {
	if format != "json" && format != "yaml" {
		return fmt.Errorf("output format %q: give json or yaml, or leave it out for a table", format)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	for _, item := range items {
		item.GetObjectKind().SetGroupVersionKind(api.SchemeGroupVersion.WithKind(kind))
	}
	list.GetObjectKind().SetGroupVersionKind(metav1.Unversioned.WithKind("List"))
	var b []byte
	if format == "json" {
		b, err = json.MarshalIndent(list, "", "    ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(list)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

package manifests

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/muster-io/muster/internal/generated/openapi"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// CRDs renders every Muster kind as an apiextensions.k8s.io/v1
// CustomResourceDefinition (cluster-scoped, with the status subresource),
// its schema converted from the project's own generated OpenAPI, so that a
// kube-apiserver serving the kinds as CRDs (the peer `make bench-peer`
// measures against) stores and validates the same shape muster does and
// cannot drift from it. The CRDs are unstructured objects: muster's go.mod
// does not carry the apiextensions types, and a dynamic client or kubectl
// applies them as they are. Sorted by name.
func CRDs() ([]map[string]interface{}, error) {
	defs := openapi.GetOpenAPIDefinitions(func(name string) spec.Ref { return spec.MustCreateRef(refPrefix + name) })
	scheme := runtime.NewScheme()
	if err := api.AddToScheme(scheme); err != nil {
		return nil, err
	}
	var crds []map[string]interface{}
	for kind, typ := range scheme.KnownTypes(api.SchemeGroupVersion) {
		obj, ok := reflect.New(typ).Interface().(runtime.Object)
		// The scheme also holds the meta kinds every group version carries
		// (WatchEvent, options) and the lists; only objects with ObjectMeta
		// are kinds of their own.
		if !ok || strings.HasSuffix(kind, "List") {
			continue
		}
		if _, err := meta.Accessor(obj); err != nil {
			continue
		}
		named, ok := obj.(interface{ OpenAPIModelName() string })
		if !ok {
			continue
		}
		crd, err := crdOf(defs, kind, named.OpenAPIModelName())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		crds = append(crds, crd)
	}
	sort.Slice(crds, func(i, j int) bool { return crdName(crds[i]) < crdName(crds[j]) })
	return crds, nil
}

const refPrefix = "#/definitions/"

func crdName(crd map[string]interface{}) string {
	return crd["metadata"].(map[string]interface{})["name"].(string)
}

func crdOf(defs map[string]common.OpenAPIDefinition, kind, model string) (map[string]interface{}, error) {
	def, ok := defs[model]
	if !ok {
		return nil, fmt.Errorf("no OpenAPI definition %s", model)
	}
	schema, err := convertSchema(defs, def.Schema, nil, true)
	if err != nil {
		return nil, err
	}
	// The same guess the apiserver's discovery makes for a kind's resource
	// (Machine -> machines, MachinePolicy -> machinepolicies).
	plural, singular := meta.UnsafeGuessKindToResource(api.SchemeGroupVersion.WithKind(kind))
	return map[string]interface{}{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]interface{}{"name": plural.Resource + "." + api.GroupName},
		"spec": map[string]interface{}{
			"group": api.GroupName,
			"scope": "Cluster",
			"names": map[string]interface{}{
				"kind": kind, "listKind": kind + "List",
				"plural": plural.Resource, "singular": singular.Resource,
			},
			"versions": []interface{}{map[string]interface{}{
				"name": api.SchemeGroupVersion.Version, "served": true, "storage": true,
				"schema":       map[string]interface{}{"openAPIV3Schema": schema},
				"subresources": map[string]interface{}{"status": map[string]interface{}{}},
			}},
		},
	}, nil
}

// convertSchema turns one OpenAPI schema into a structural JSONSchemaProps
// (as JSON): references resolved inline, every node typed, the
// x-kubernetes-* list and map markers kept. stack holds the definitions
// being expanded, to stop at a recursive type; root says this is the
// object's top level, where a CRD's metadata must be a bare object (the
// apiserver validates ObjectMeta itself).
func convertSchema(defs map[string]common.OpenAPIDefinition, s spec.Schema, stack []string, root bool) (map[string]interface{}, error) {
	out := map[string]interface{}{}
	if s.Description != "" {
		out["description"] = s.Description
	}
	if ref := s.Ref.String(); ref != "" {
		name := strings.TrimPrefix(ref, refPrefix)
		def, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("unresolved reference %s", name)
		}
		for _, seen := range stack {
			if seen == name {
				// A recursive type has no finite structural schema; this is
				// the one place unknown fields must be kept as they come.
				out["type"] = "object"
				out["x-kubernetes-preserve-unknown-fields"] = true
				return out, nil
			}
		}
		resolved, err := convertSchema(defs, def.Schema, append(stack, name), false)
		if err != nil {
			return nil, err
		}
		// The referring property's description says more about the field
		// than the type's.
		for k, v := range resolved {
			if _, set := out[k]; !set {
				out[k] = v
			}
		}
		return out, nil
	}
	switch len(s.Type) {
	case 0:
	case 1:
		out["type"] = s.Type[0]
	default:
		return nil, fmt.Errorf("several types %v", s.Type)
	}
	if s.Format != "" {
		out["format"] = s.Format
	}
	// Defaults on scalars only: an object's `default: {}` is what the Go
	// type's zero value gives anyway, and CRDs refuse defaults on metadata.
	if s.Default != nil && out["type"] != "object" && out["type"] != "array" {
		out["default"] = s.Default
	}
	if len(s.Enum) > 0 {
		out["enum"] = s.Enum
	}
	for k, v := range s.Extensions {
		if strings.HasPrefix(k, "x-kubernetes-") {
			out[k] = v
		}
	}
	if len(s.Properties) > 0 {
		props := map[string]interface{}{}
		for name, p := range s.Properties {
			if root && name == "metadata" {
				props[name] = map[string]interface{}{"type": "object"}
				continue
			}
			c, err := convertSchema(defs, p, stack, false)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			props[name] = c
		}
		out["properties"] = props
	}
	if len(s.Required) > 0 {
		out["required"] = append([]string(nil), s.Required...)
	}
	if s.Items != nil {
		if s.Items.Schema == nil {
			return nil, fmt.Errorf("tuple items are not structural")
		}
		c, err := convertSchema(defs, *s.Items.Schema, stack, false)
		if err != nil {
			return nil, fmt.Errorf("items: %w", err)
		}
		out["items"] = c
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		c, err := convertSchema(defs, *s.AdditionalProperties.Schema, stack, false)
		if err != nil {
			return nil, fmt.Errorf("additionalProperties: %w", err)
		}
		out["additionalProperties"] = c
	}
	if _, typed := out["type"]; !typed {
		// Only an untyped Go field (interface{}, RawExtension) gets here:
		// its shape is unknown, so it is kept whole.
		out["type"] = "object"
		out["x-kubernetes-preserve-unknown-fields"] = true
	}
	return out, nil
}

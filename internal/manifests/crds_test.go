package manifests

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCRDs: every Muster kind converts, cluster-scoped with the status
// subresource, and its schema is structural as the apiextensions apiserver
// requires (every node typed, references resolved, metadata a bare object);
// the peer in test/e2e (TestBenchPeer) has a real kube-apiserver accept them.
func TestCRDs(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, crd := range crds {
		spec := crd["spec"].(map[string]interface{})
		names := spec["names"].(map[string]interface{})
		kind := names["kind"].(string)
		kinds[kind] = true
		if spec["scope"] != "Cluster" || crdName(crd) != names["plural"].(string)+".muster.io" {
			t.Errorf("%s: scope %v, name %s", kind, spec["scope"], crdName(crd))
		}
		version := spec["versions"].([]interface{})[0].(map[string]interface{})
		if _, ok := version["subresources"].(map[string]interface{})["status"]; !ok {
			t.Errorf("%s: no status subresource", kind)
		}
		schema := version["schema"].(map[string]interface{})["openAPIV3Schema"].(map[string]interface{})
		props := schema["properties"].(map[string]interface{})
		if md := props["metadata"].(map[string]interface{}); len(md) != 1 || md["type"] != "object" {
			t.Errorf("%s: metadata is %v, want a bare object", kind, md)
		}
		// ControllerLease's status is empty, but present: the subresource
		// needs the field.
		for _, part := range []string{"spec", "status"} {
			if p, ok := props[part].(map[string]interface{}); !ok || p["type"] != "object" {
				t.Errorf("%s: %s is %v", kind, part, props[part])
			}
		}
		walk(t, kind, schema)
		if b, err := json.Marshal(crd); err != nil || strings.Contains(string(b), "$ref") {
			t.Errorf("%s: marshal %v, or a reference left: %.200s", kind, err, b)
		}
	}
	for _, kind := range []string{"Cluster", "ClusterRegistration", "ClusterRegistrationToken", "Machine", "MachinePlan", "MachinePool", "NodePassword", "ServerEndpoint", "ControllerLease"} {
		if !kinds[kind] {
			t.Errorf("no CRD for %s (have %v)", kind, kinds)
		}
	}
	// The list markers that make server-side apply merge lists by key must
	// survive the conversion.
	b, _ := json.Marshal(crds)
	if !strings.Contains(string(b), `"x-kubernetes-list-map-keys":["type"]`) {
		t.Errorf("x-kubernetes-list-map-keys lost")
	}
}

func walk(t *testing.T, path string, s map[string]interface{}) {
	t.Helper()
	if _, ok := s["type"].(string); !ok {
		t.Errorf("%s: untyped node %v", path, s)
	}
	for name, p := range mapOf(s["properties"]) {
		walk(t, path+"."+name, p.(map[string]interface{}))
	}
	if items, ok := s["items"].(map[string]interface{}); ok {
		walk(t, path+"[]", items)
	}
	if ap, ok := s["additionalProperties"].(map[string]interface{}); ok {
		walk(t, path+"{}", ap)
	}
	if s["type"] == "array" && s["items"] == nil {
		t.Errorf("%s: array without items", path)
	}
}

func mapOf(v interface{}) map[string]interface{} {
	m, _ := v.(map[string]interface{})
	return m
}

package k8sproxy

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		path, name, rest string
		ok               bool
	}{
		{"/k8s/clusters/prod/api/v1/namespaces", "prod", "/api/v1/namespaces", true},
		{"/k8s/clusters/prod", "prod", "/", true},
		{"/k8s/clusters/prod/", "prod", "/", true},
		{"/k8s/clusters/", "", "", false},
		{"/k8s/clusters", "", "", false},
		{"/apis/muster.io/v1alpha1/clusters/prod", "", "", false},
	} {
		name, rest, ok := Split(tc.path)
		if name != tc.name || rest != tc.rest || ok != tc.ok {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q, %v", tc.path, name, rest, ok, tc.name, tc.rest, tc.ok)
		}
	}
}

// TestRequestInfo: every request to a cluster's API is a verb on
// clusters/proxy of that cluster, reads "get", an upgrade "create"
// whatever its method; other paths are left to the apiserver's resolver.
func TestRequestInfo(t *testing.T) {
	next := &request.RequestInfoFactory{APIPrefixes: sets.NewString("apis", "api"), GrouplessAPIPrefixes: sets.NewString("api")}
	r := RequestInfoResolver(next)
	for _, tc := range []struct {
		method, path string
		upgrade      bool
		verb         string
	}{
		{http.MethodGet, "/k8s/clusters/prod/api/v1/namespaces?watch=true", false, "get"},
		{http.MethodHead, "/k8s/clusters/prod/readyz", false, "get"},
		{http.MethodPost, "/k8s/clusters/prod/api/v1/namespaces", false, "create"},
		{http.MethodPut, "/k8s/clusters/prod/api/v1/namespaces/a", false, "update"},
		{http.MethodPatch, "/k8s/clusters/prod/api/v1/namespaces/a", false, "patch"},
		{http.MethodDelete, "/k8s/clusters/prod/api/v1/namespaces/a", false, "delete"},
		{"PROPFIND", "/k8s/clusters/prod/x", false, "create"},
		{http.MethodGet, "/k8s/clusters/prod/api/v1/namespaces/a/pods/p/exec", true, "create"},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.upgrade {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		info, err := r.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		if !info.IsResourceRequest || info.Verb != tc.verb || info.Resource != "clusters" || info.Subresource != "proxy" || info.Name != "prod" || info.APIGroup != "muster.io" {
			t.Errorf("%s %s (upgrade %v): %+v; want %s on clusters/proxy prod", tc.method, tc.path, tc.upgrade, info, tc.verb)
		}
	}
	info, _ := r.NewRequestInfo(httptest.NewRequest(http.MethodGet, "/apis/muster.io/v1alpha1/clusters/prod", nil))
	if info.Resource != "clusters" || info.Subresource != "" || info.Verb != "get" {
		t.Errorf("a Muster request resolved to %+v", info)
	}
}

// TestImpersonate: the client's credentials and impersonation never go
// downstream; the user's name and groups do, with Muster's administrators
// as muster:admins and no system: group.
func TestImpersonate(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/k8s/clusters/prod/api", nil)
	for k, v := range map[string]string{
		"Authorization": "Bearer muster-session", "Cookie": "muster-session=x", "Impersonate-User": "admin",
		"Impersonate-Group": "system:masters", "Impersonate-Uid": "0", "Impersonate-Extra-Scopes": "all",
		"X-Muster-Forwarded-By": "other", "Accept": "application/json",
	} {
		req.Header.Set(k, v)
	}
	who := &user.DefaultInfo{Name: "otto", Groups: []string{"muster:operators", user.SystemPrivilegedGroup, user.AllAuthenticated}}
	impersonate(req, who, "")
	h := req.Header
	if h.Get("Authorization") != "" || h.Get("Cookie") != "" || h.Get("Impersonate-Uid") != "" || h.Get("Impersonate-Extra-Scopes") != "" || h.Get("X-Muster-Forwarded-By") != "" {
		t.Errorf("client headers went through: %v", h)
	}
	if h.Get("Impersonate-User") != "otto" || !slices.Equal(h.Values("Impersonate-Group"), []string{"muster:operators", AdminsGroup}) || h.Get("Accept") != "application/json" {
		t.Errorf("downstream headers %v; want otto in muster:operators and muster:admins, Accept kept", h)
	}
	impersonate(req, who, "cluster-token")
	if h.Get("Authorization") != "Bearer cluster-token" || len(h.Values("Impersonate-Group")) != 2 {
		t.Errorf("with a token credential: %v", h)
	}
}

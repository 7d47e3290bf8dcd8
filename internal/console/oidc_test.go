package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Without an identity provider, the console offers none (the sign-in
// page shows console tokens only) and its OIDC paths say how to get one;
// with one, they are browser GETs only.
func TestOIDCPathsWithoutProvider(t *testing.T) {
	c := New(&memStore{m: map[string]Record{}}, &memStore{m: map[string]Record{}})
	for _, path := range []string{OIDCProviderPath, OIDCStartPath, OIDCCallbackPath} {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "identity provider") {
			t.Errorf("GET %s: %d %s, want 404 saying there is no identity provider", path, w.Code, w.Body)
		}
		w = httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, nil))
		if w.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", path, w.Code)
		}
	}
}

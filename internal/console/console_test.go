package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type memStore struct {
	mu sync.Mutex
	m  map[string]Record
}

func (s *memStore) Put(_ context.Context, id string, r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[id] = r
	return nil
}
func (s *memStore) Get(_ context.Context, id string) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[id]
	return r, ok, nil
}
func (s *memStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

func TestParseToken(t *testing.T) {
	good := Token{ID: strings.Repeat("a", 16), Secret: strings.Repeat("b", 64)}.String()
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{good, true},
		{" " + good + "\n", true},
		{strings.TrimPrefix(good, TokenPrefix), false},
		{TokenPrefix + strings.Repeat("a", 16), false},
		{TokenPrefix + strings.Repeat("a", 15) + "." + strings.Repeat("b", 64), false},
		{TokenPrefix + strings.Repeat("z", 16) + "." + strings.Repeat("b", 64), false},
		{"", false},
	} {
		_, err := ParseToken(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseToken(%q) err=%v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func TestMintAndCheck(t *testing.T) {
	store := &memStore{m: map[string]Record{}}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tok, exp, err := Mint(context.Background(), store, "alice", []string{"muster:viewers"}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if rec := store.m[tok.ID]; rec.SecretHash == "" || strings.Contains(rec.SecretHash, tok.Secret) {
		t.Fatalf("the store must keep only a hash of the secret, got %+v", rec)
	}
	wrong := Token{ID: tok.ID, Secret: strings.Repeat("0", 64)}.String()
	unknown := Token{ID: strings.Repeat("0", 16), Secret: tok.Secret}.String()
	for _, tc := range []struct {
		name, token string
		at          time.Time
		wantErr     string
	}{
		{"right token", tok.String(), now, ""},
		{"wrong secret", wrong, now, "wrong or has expired"},
		{"unknown id", unknown, now, "wrong or has expired"},
		{"expired", tok.String(), exp, "wrong or has expired"},
		{"malformed", "hello", now, "not a console token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := Check(context.Background(), store, tc.token, tc.at)
			if tc.wantErr == "" {
				if err != nil || rec.User != "alice" {
					t.Fatalf("Check = %+v, %v", rec, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Check err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, ok := store.m[tok.ID]; ok {
		t.Error("an expired token is dropped from the store when it is presented")
	}
	for _, ttl := range []time.Duration{0, -time.Second, MaxTTL + time.Second} {
		if _, _, err := Mint(context.Background(), store, "a", nil, ttl, now); err == nil {
			t.Errorf("Mint with ttl %s succeeded", ttl)
		}
	}
	if _, _, err := Mint(context.Background(), store, " ", nil, time.Hour, now); err == nil {
		t.Error("Mint without a user succeeded")
	}
}

func TestSessionAuthenticator(t *testing.T) {
	ctx := context.Background()
	s := NewSessions(&memStore{m: map[string]Record{}})
	now := time.Now()
	s.Now = func() time.Time { return now }
	live, err := s.Create(ctx, Session{User: "bob", Groups: []string{"muster:operators"}, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Create(ctx, Session{User: "eve", Expires: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	id, _, _ := strings.Cut(live, ".")
	for _, tc := range []struct {
		name   string
		cookie string
		header string
		want   string
	}{
		{"cookie and header", live, "1", "bob"},
		{"cookie without header (cross-site)", live, "", ""},
		{"cookie with a wrong header value", live, "true", ""},
		{"header without cookie", "", "1", ""},
		{"unknown session", strings.Repeat("a", 16) + "." + strings.Repeat("b", 64), "1", ""},
		{"a live session's id with a wrong secret", id + "." + strings.Repeat("b", 64), "1", ""},
		{"not a session cookie", strings.Repeat("a", 64), "1", ""},
		{"expired session", old, "1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/apis/muster.io/v1alpha1/machines", nil)
			if tc.cookie != "" {
				r.AddCookie(&http.Cookie{Name: CookieName, Value: tc.cookie})
			}
			if tc.header != "" {
				r.Header.Set(Header, tc.header)
			}
			resp, ok, err := s.AuthenticateRequest(r)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if ok {
				got = resp.User.GetName()
			}
			if got != tc.want {
				t.Fatalf("user %q, want %q", got, tc.want)
			}
		})
	}
	if err := s.Delete(ctx, live); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, live); ok {
		t.Error("a deleted session still authenticates")
	}
}

// callSession makes one request to c's session endpoint, with or without
// the console header and a cookie.
func callSession(c *Console, method, body string, header bool, cookie *http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, SessionPath, strings.NewReader(body))
	if header {
		r.Header.Set(Header, "1")
	}
	if cookie != nil {
		r.AddCookie(cookie)
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w
}

func TestSessionEndpoint(t *testing.T) {
	store := &memStore{m: map[string]Record{}}
	c := New(store, &memStore{m: map[string]Record{}})
	tok, _, err := Mint(context.Background(), store, "alice", []string{"muster:viewers"}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, body string, header bool, cookie *http.Cookie) *httptest.ResponseRecorder {
		return callSession(c, method, body, header, cookie)
	}
	if w := do("GET", "", true, nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("who am I, before signing in: %d, want 401", w.Code)
	}
	if w := do("POST", `{"token":"`+tok.String()+`"}`, false, nil); w.Code != http.StatusForbidden {
		t.Fatalf("sign-in without the console header: %d, want 403 (login CSRF)", w.Code)
	}
	if w := do("POST", `{"token":"mct_0000000000000000.`+strings.Repeat("0", 64)+`"}`, true, nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("sign-in with a wrong token: %d, want 401", w.Code)
	}
	w := do("POST", `{"token":"`+tok.String()+`"}`, true, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("sign-in: %d %s", w.Code, w.Body)
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies: %v", cookies)
	}
	ck := cookies[0]
	if !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Expires.IsZero() {
		t.Fatalf("the session cookie must be HttpOnly, Secure, SameSite=Strict, Path=/ with an expiry: %+v", ck)
	}
	if strings.Contains(w.Body.String(), tok.Secret) || strings.Contains(ck.Value, tok.Secret) {
		t.Fatal("the token's secret must not come back")
	}
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy"} {
		if w.Header().Get(h) == "" {
			t.Errorf("header %s missing", h)
		}
	}
	if w := do("GET", "", true, ck); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "alice") {
		t.Fatalf("who am I: %d %s", w.Code, w.Body)
	}
	if w := do("DELETE", "", true, ck); w.Code != http.StatusNoContent {
		t.Fatalf("sign-out: %d", w.Code)
	}
	if w := do("GET", "", true, ck); w.Code != http.StatusUnauthorized {
		t.Fatalf("after sign-out: %d, want 401", w.Code)
	}
}

func TestAssetsAndHeaders(t *testing.T) {
	c := New(&memStore{m: map[string]Record{}}, &memStore{m: map[string]Record{}})
	for _, tc := range []struct {
		path, ctype string
		code        int
	}{
		{"/console/", "text/html", 200},
		{"/console/app.js", "text/javascript", 200},
		{"/console/app.css", "text/css", 200},
		{"/console/../etc/passwd", "application/json", 404},
		{"/console/nope.html", "application/json", 404},
	} {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest("GET", tc.path, nil))
		if w.Code != tc.code || !strings.HasPrefix(w.Header().Get("Content-Type"), tc.ctype) {
			t.Errorf("%s: %d %s", tc.path, w.Code, w.Header().Get("Content-Type"))
		}
		if w.Header().Get("Content-Security-Policy") != CSP || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", tc.path, w.Header())
		}
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, httptest.NewRequest("GET", "/console/", nil))
	if strings.Contains(w.Body.String(), "<script>") || strings.Contains(w.Body.String(), "style=") {
		t.Error("index.html must have no inline script or style (CSP)")
	}
}

func TestMintNeedsAdmin(t *testing.T) {
	c := New(&memStore{m: map[string]Record{}}, &memStore{m: map[string]Record{}})
	w := httptest.NewRecorder()
	c.ServeHTTP(w, httptest.NewRequest("POST", TokensPath, strings.NewReader(`{"user":"x","ttl":"1h"}`)))
	if w.Code != http.StatusForbidden {
		t.Fatalf("minting without an admin identity: %d, want 403", w.Code)
	}
}

// TestScriptParsesNoHTML: hostile names and messages reach the page only
// through textContent and attributes; a use of an HTML-parsing sink in the
// script would be the way they became markup.
func TestScriptParsesNoHTML(t *testing.T) {
	b, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "createContextualFragment", "DOMParser", "eval(", "new Function"} {
		if strings.Contains(string(b), sink) {
			t.Errorf("app.js uses %s, which parses text as HTML or code", sink)
		}
	}
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{`href="#/tokens"`, `href="#/rollouts"`} {
		if !strings.Contains(string(page), link) {
			t.Errorf("the nav has no %s link", link)
		}
	}
}

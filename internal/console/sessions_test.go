package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/store"
)

// Two servers on one datastore (a real kine on SQLite) share sessions: a
// browser signed in on one is signed in on the other, a sign-out on one
// ends it on the other within CacheFor, and the datastore holds no
// cookie.
func TestSessionsShared(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds, err := store.Open(ctx, store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	client, err := ds.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	a, b := OnDatastore(client), OnDatastore(client)
	now := time.Now()
	clock := func() time.Time { return now }
	a.Now, b.Now, a.Sessions.Now, b.Sessions.Now = clock, clock, clock, clock

	tok, _, err := Mint(ctx, a.Tokens, "alice", []string{"muster:operators"}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	call := func(c *Console, method, body string, ck *http.Cookie) *httptest.ResponseRecorder {
		return callSession(c, method, body, true, ck)
	}
	w := call(a, "POST", `{"token":"`+tok.String()+`"}`, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("sign-in on server a: %d %s", w.Code, w.Body)
	}
	ck := w.Result().Cookies()[0]
	if w := call(b, "GET", "", ck); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "alice") {
		t.Fatalf("the session on server b: %d %s, want alice", w.Code, w.Body)
	}
	id, secret, _ := strings.Cut(ck.Value, ".")
	resp, err := client.Get(ctx, SessionKeyPrefix+id)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the session's key: %v %v", resp, err)
	}
	if strings.Contains(string(resp.Kvs[0].Value), secret) {
		t.Error("the datastore holds the cookie's secret; it must hold only its hash")
	}
	if resp.Kvs[0].Lease == 0 {
		t.Error("the session's key has no lease: the datastore would keep it after it expires")
	}

	if w := call(a, "DELETE", "", ck); w.Code != http.StatusNoContent {
		t.Fatalf("sign-out on server a: %d", w.Code)
	}
	if w := call(a, "GET", "", ck); w.Code != http.StatusUnauthorized {
		t.Fatalf("server a after its sign-out: %d, want 401 at once", w.Code)
	}
	now = now.Add(CacheFor)
	if w := call(b, "GET", "", ck); w.Code != http.StatusUnauthorized {
		t.Fatalf("server b %s after the sign-out on a: %d, want 401", CacheFor, w.Code)
	}
}

// Sign-ins are bounded per client address: past the burst, a 429 that
// says when to retry, and the token is not even checked; another address
// is not affected.
func TestSignInLimited(t *testing.T) {
	c := New(&memStore{m: map[string]Record{}}, &memStore{m: map[string]Record{}})
	now := time.Now()
	c.Sessions.limits.Now = func() time.Time { return now }
	try := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", SessionPath, strings.NewReader(`{"token":"mct_0000000000000000.`+strings.Repeat("0", 64)+`"}`))
		r.Header.Set(Header, "1")
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w
	}
	for i := range signInBurst {
		if w := try("192.0.2.7:4000"); w.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d, want 401 (a wrong token, within the burst)", i+1, w.Code)
		}
	}
	w := try("192.0.2.7:4001")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "retry in") {
		t.Fatalf("attempt past the burst: %d %q %s, want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if w := try("198.51.100.9:4000"); w.Code != http.StatusUnauthorized {
		t.Fatalf("another address: %d, want 401", w.Code)
	}
	now = now.Add(signInEvery)
	if w := try("192.0.2.7:4002"); w.Code != http.StatusUnauthorized {
		t.Fatalf("after %s: %d, want one more attempt", signInEvery, w.Code)
	}
}

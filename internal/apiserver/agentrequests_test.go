package apiserver

import (
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func TestAgentRequests(t *testing.T) {
	type step struct {
		do     string // begin, watch, void, keep, done
		name   string
		uid    string
		want   string // "", "forbidden", "too many"
		ended  int    // requests cancelled so far
		handle int    // index of the request done ends
	}
	r := newAgentRequests()
	var cancelled int
	var begun []*agentRequest
	run := func(i int, s step) {
		var err error
		switch s.do {
		case "begin", "watch":
			var req *agentRequest
			req, err = r.begin(s.name, s.uid, s.do == "watch", func() { cancelled++ })
			begun = append(begun, req)
		case "void":
			r.void(s.uid)
		case "keep":
			r.keepOnly(s.name, s.uid)
		case "done":
			r.done(s.uid, begun[s.handle])
		}
		switch {
		case s.want == "" && err != nil,
			s.want == "forbidden" && !apierrors.IsForbidden(err),
			s.want == "too many" && !apierrors.IsTooManyRequests(err):
			t.Fatalf("step %d (%s %s/%s): %v, want %q", i, s.do, s.name, s.uid, err, s.want)
		}
		if cancelled != s.ended {
			t.Fatalf("step %d: %d requests ended, want %d", i, cancelled, s.ended)
		}
	}
	steps := []step{
		{do: "watch", name: "n1", uid: "u1"},
		{do: "watch", name: "n1", uid: "u1"},
		{do: "begin", name: "n1", uid: "u1"},
		{do: "watch", name: "n2", uid: "u2"},
		// A Machine n1 with another UID ends u1's requests, not n2's.
		{do: "keep", name: "n1", uid: "u1b", ended: 3},
		{do: "begin", name: "n1", uid: "u1", want: "forbidden", ended: 3},
		{do: "void", uid: "u2", ended: 4},
		{do: "watch", name: "n2", uid: "u2", want: "forbidden", ended: 4},
		{do: "void", uid: "nobody", ended: 4},
	}
	for i, s := range steps {
		run(i, s)
	}
	// The watch limit counts per UID and frees a slot when a watch ends.
	begun = nil
	for i := 0; i < MaxAgentWatches; i++ {
		run(i, step{do: "watch", name: "n3", uid: "u3", ended: 4})
	}
	run(0, step{do: "watch", name: "n3", uid: "u3", want: "too many", ended: 4})
	run(0, step{do: "begin", name: "n3", uid: "u3", ended: 4})
	run(0, step{do: "done", uid: "u3", handle: 0, ended: 4})
	run(0, step{do: "watch", name: "n3", uid: "u3", ended: 4})
	if _, ok := r.byUID["u1"]; ok {
		t.Error("a voided UID's requests are still tracked")
	}
}

func TestCapWatchTimeout(t *testing.T) {
	cases := []struct{ query, want string }{
		{"watch=1", "600"},
		{"watch=1&timeoutSeconds=60", "60"},
		{"watch=1&timeoutSeconds=3600", "600"},
		{"watch=1&timeoutSeconds=0", "600"},
		{"watch=1&timeoutSeconds=-5", "600"},
		{"watch=1&timeoutSeconds=junk", "600"},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("GET", "/apis/muster.io/v1alpha1/machines?"+tc.query, nil)
		capWatchTimeout(r)
		if got := r.URL.Query().Get("timeoutSeconds"); got != tc.want {
			t.Errorf("%s: timeoutSeconds %q, want %q", tc.query, got, tc.want)
		}
	}
}

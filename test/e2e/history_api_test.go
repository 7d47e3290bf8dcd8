package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type historyAnswer struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Items []struct {
		From, To, Event, Reason, By string
		Seq                         int64
	} `json:"items"`
	Truncated bool `json:"truncated"`
}

// A Machine's whole transition history through the API
// (machines/<name>/history), as the console's timeline and an auditor
// read it: a viewer reads it with kubectl, limit= keeps the newest, an
// agent may not read it, bad input is a 400 and an unknown name a 404, and
// a deleted machine's history is still served.
func TestMachineHistoryAPI(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		dir := t.TempDir()
		a := startAgent(t, s, dir, "--token", newToken(t, s), "--node-name", "hist-1")
		a.waitOutput("running as machine hist-1", time.Minute)
		viewer := userKubeconfig(t, s, "vera", "muster:viewers")
		path := "/apis/muster.io/v1alpha1/machines/hist-1/history"
		read := func(query string) (historyAnswer, string, error) {
			out, err := kubectlAs(viewer, "get", "--raw", path+query)
			var h historyAnswer
			if err == nil {
				err = json.Unmarshal([]byte(out), &h)
			}
			return h, out, err
		}
		var h historyAnswer
		waitFor(t, 30*time.Second, "the history to record the machine reaching Running", func() bool {
			var err error
			h, _, err = read("")
			return err == nil && len(h.Items) > 0 && h.Items[len(h.Items)-1].To == "Running"
		})
		if h.Kind != "Machine" || h.Name != "hist-1" || h.Truncated {
			t.Fatalf("history answer %+v", h)
		}
		for i, it := range h.Items {
			if it.Seq != int64(i+1) || (i > 0 && it.From != h.Items[i-1].To) {
				t.Fatalf("transition %d of %d is not the next one: %+v", i+1, len(h.Items), h.Items)
			}
		}
		last, out, err := read("?limit=1")
		if err != nil || len(last.Items) != 1 || !last.Truncated || last.Items[0] != h.Items[len(h.Items)-1] {
			t.Fatalf("limit=1: want the newest transition and truncated, got %v %s", err, out)
		}
		for _, bad := range []string{"?limit=0", "?limit=5001", "?limit=x"} {
			if out, err := kubectlAs(viewer, "get", "--raw", path+bad); err == nil || !strings.Contains(out, "give a number of transitions from 1 to 5000") {
				t.Errorf("%s: want a 400 that says what to give, got %v %s", bad, err, out)
			}
		}
		if out, err := kubectlAs(viewer, "get", "--raw", "/apis/muster.io/v1alpha1/machines/nope/history"); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("unknown machine: want 404, got %v %s", err, out)
		}
		if code, _, body := do(t, certHTTPClient(t, s, dir), s, "GET", path, nil, nil); code != 403 {
			t.Errorf("the agent reading its machine's history: %d %s, want 403", code, body)
		}
		a.kill()
		s.mustKubectl("delete", "machine", "hist-1", "--wait=true", "--timeout=60s")
		waitFor(t, 30*time.Second, "the deleted machine's history to still be served", func() bool {
			after, _, err := read("")
			return err == nil && len(after.Items) >= len(h.Items)
		})
	})
}

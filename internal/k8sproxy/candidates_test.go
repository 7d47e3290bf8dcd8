package k8sproxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestCandidates(t *testing.T) {
	type m struct {
		name     string
		phase    api.MachinePhase
		probe    string // "pass", "fail", or "" for a plan without the kube-apiserver probe
		deleting bool
	}
	for _, tc := range []struct {
		name     string
		machines []m
		want     string // the candidates, best first
		probed   bool
	}{
		{"plans without the probe: the Running ones",
			[]m{{"b", api.MachinePhaseRunning, "", false}, {"a", api.MachinePhaseRunning, "", false}, {"c", api.MachinePhaseUpdating, "", false}}, "a,b", false},
		{"passing first, Running before Updating; failing ones not while one passes",
			[]m{{"a", api.MachinePhaseUpdating, "pass", false}, {"b", api.MachinePhaseRunning, "fail", false}, {"c", api.MachinePhaseRunning, "pass", false}}, "c,a", true},
		{"a new member running only etcd is never chosen",
			[]m{{"a", api.MachinePhaseRunning, "", false}, {"b", api.MachinePhaseRunning, "pass", false}}, "b", true},
		{"none passing: the Running ones whose probe fails, not the Updating one",
			[]m{{"a", api.MachinePhaseUpdating, "fail", false}, {"b", api.MachinePhaseRunning, "fail", false}, {"c", api.MachinePhaseRunning, "", false}}, "b", true},
		{"none passing and none Running: none",
			[]m{{"a", api.MachinePhaseUpdating, "fail", false}, {"b", api.MachinePhaseUnavailable, "fail", false}}, "", true},
		{"Unavailable with a stale passing probe is not chosen",
			[]m{{"a", api.MachinePhaseUnavailable, "pass", false}, {"b", api.MachinePhaseRunning, "fail", false}}, "b", true},
		{"being deleted: never",
			[]m{{"a", api.MachinePhaseRunning, "pass", true}, {"b", api.MachinePhaseRunning, "fail", true}}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ms []api.Machine
			probes := map[string]string{}
			for _, x := range tc.machines {
				mm := api.Machine{ObjectMeta: metav1.ObjectMeta{Name: x.name}, Status: api.MachineStatus{Phase: x.phase}}
				if x.deleting {
					now := metav1.Now()
					mm.DeletionTimestamp = &now
				}
				ms = append(ms, mm)
				probes[x.name] = x.probe
			}
			cands, probed, states := candidates(ms, func(name string) (bool, bool) { return probes[name] == "pass", probes[name] != "" })
			got := strings.Join(cands, ",")
			if got != tc.want || probed != tc.probed {
				t.Errorf("candidates: %q probed %v; want %q probed %v (states %v)", got, probed, tc.want, tc.probed, states)
			}
			if len(states) != len(tc.machines) {
				t.Errorf("states %v: want one per machine", states)
			}
		})
	}
}

func TestRetriable(t *testing.T) {
	for _, tc := range []struct {
		method, body string
		upgrade      bool
		want         bool
	}{
		{http.MethodGet, "", false, true},
		{http.MethodHead, "", false, true},
		{http.MethodGet, "", true, false}, // a watch over a websocket, exec: a stream
		{http.MethodGet, "{}", false, false},
		{http.MethodPost, "", false, false},
		{http.MethodDelete, "", false, false},
	} {
		r := httptest.NewRequest(tc.method, "/k8s/clusters/prod/api", strings.NewReader(tc.body))
		if tc.upgrade {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
		}
		if got := retriable(r); got != tc.want {
			t.Errorf("retriable(%s body %q upgrade %v) = %v; want %v", tc.method, tc.body, tc.upgrade, got, tc.want)
		}
	}
}

package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/muster-io/muster/internal/history"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// HistoryReader reads an object's recorded transitions, newest limit of
// them, oldest first (internal/history on the SQL datastore). Nil on an
// external etcd, which has no history table.
type HistoryReader func(ctx context.Context, kind, name string, limit int) ([]history.Record, error)

// Bounds of one history answer.
const (
	DefaultHistoryLimit = 500
	MaxHistoryLimit     = 5000
)

// HistoryREST is the history subresource of a lifecycle kind
// (machines/history, clusters/history): every transition the datastore
// kept of every object that had the name, after its status.transitions
// (the last 20) dropped them and after it was deleted. It is read like
// the object: whoever may get machines/* reads it; agents may not.
type HistoryREST struct {
	kind     string
	resource string
	getter   rest.Getter
	read     HistoryReader
}

var _ rest.Connecter = &HistoryREST{}

// HistoryStorages are the history subresources, keyed as the apiserver
// installs them; getters are the kinds' main storages by resource.
func HistoryStorages(getters map[string]rest.Getter, read HistoryReader) map[string]rest.Storage {
	out := map[string]rest.Storage{}
	for resource, kind := range map[string]string{Machine.Resource: "Machine", Cluster.Resource: "Cluster"} {
		if g, ok := getters[resource]; ok {
			out[resource+"/history"] = &HistoryREST{kind: kind, resource: resource, getter: g, read: read}
		}
	}
	return out
}

// New implements rest.Storage: the object whose history this is.
func (r *HistoryREST) New() runtime.Object {
	if r.kind == "Cluster" {
		return &api.Cluster{}
	}
	return &api.Machine{}
}

// Destroy implements rest.Storage.
func (r *HistoryREST) Destroy() {}

// NewConnectOptions implements rest.Connecter: the handler reads limit=.
func (r *HistoryREST) NewConnectOptions() (runtime.Object, bool, string) { return nil, false, "" }

// ConnectMethods implements rest.Connecter.
func (r *HistoryREST) ConnectMethods() []string { return []string{http.MethodGet} }

// HistoryList is the answer: the object's kind and name, its transitions
// oldest first, and whether older ones were left out (limit).
type HistoryList struct {
	Kind      string           `json:"kind"`
	Name      string           `json:"name"`
	Items     []history.Record `json:"items"`
	Truncated bool             `json:"truncated"`
}

// Connect implements rest.Connecter. A name never seen and not stored is
// 404; a deleted object's history is still served, as an auditor needs it.
func (r *HistoryREST) Connect(ctx context.Context, name string, _ runtime.Object, responder rest.Responder) (http.Handler, error) {
	gr := api.Resource(r.resource)
	if r.read == nil {
		return nil, apierrors.NewGenericServerResponse(http.StatusNotImplemented, "get", gr, name,
			"the transition history is kept only on a SQL datastore (SQLite or PostgreSQL); on etcd read status.transitions (the last 20)", 0, false)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		limit := DefaultHistoryLimit
		if v := req.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxHistoryLimit {
				responder.Error(apierrors.NewBadRequest(fmt.Sprintf("limit=%q: give a number of transitions from 1 to %d", v, MaxHistoryLimit)))
				return
			}
			limit = n
		}
		// One more than asked tells whether older ones were left out.
		recs, err := r.read(req.Context(), r.kind, name, limit+1)
		if err != nil {
			responder.Error(apierrors.NewServiceUnavailable("reading the transition history failed: " + err.Error() + "; retry in a few seconds"))
			return
		}
		if len(recs) == 0 {
			if _, err := r.getter.Get(req.Context(), name, &metav1.GetOptions{}); err != nil {
				responder.Error(err)
				return
			}
		}
		out := HistoryList{Kind: r.kind, Name: name, Items: recs}
		if len(recs) > limit {
			out.Items, out.Truncated = recs[len(recs)-limit:], true
		}
		if out.Items == nil {
			out.Items = []history.Record{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}), nil
}

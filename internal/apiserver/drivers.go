package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/driver"
)

// DriversPath publishes the machine-pool drivers and what config each
// accepts: `kubectl get --raw /drivers` lists them, `kubectl get --raw
// /drivers/NAME` prints one's schema, the document admission checks pools
// against. Read-only, for viewers, operators and admins (roles.go).
const DriversPath = "/drivers"

// driverSummary is one entry of GET /drivers.
type driverSummary struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Error says why the driver's schema could not be read; pools naming
	// it are refused until it is fixed.
	Error string `json:"error,omitempty"`
}

// driversHandler serves DriversPath from the registry admission uses, so
// what users read is what their pools are checked against.
type driversHandler struct{ drivers *driver.Registry }

func (h driversHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, fmt.Sprintf("%s is read-only; use GET", DriversPath))
		return
	}
	name := strings.Trim(strings.TrimPrefix(r.URL.Path, DriversPath), "/")
	if name == "" {
		list := struct {
			Drivers []driverSummary `json:"drivers"`
		}{Drivers: []driverSummary{}}
		for _, n := range h.drivers.Names() {
			s, err := h.drivers.Schema(r.Context(), n)
			entry := driverSummary{Name: n, Description: s.Description}
			if err != nil {
				entry.Error = err.Error()
			}
			list.Drivers = append(list.Drivers, entry)
		}
		writeJSON(w, list)
		return
	}
	s, err := h.drivers.Schema(r.Context(), name)
	var unknown *driver.UnknownError
	switch {
	case errors.As(err, &unknown):
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, err.Error())
	case err != nil:
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, err.Error())
	default:
		writeJSON(w, s)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeStatus answers with a metav1.Status, which kubectl prints as
// "Error from server (Reason): message".
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
	})
}

// Package driver is how the server creates and removes the hosts of the
// machines it provisions itself (MachinePools): a small protocol any
// infrastructure can implement as an executable, and the built-in drivers.
//
// An executable driver is muster-driver-NAME in the server's drivers dir,
// called as `muster-driver-NAME schema|create|remove|status` with one JSON
// request on stdin (`{}` for schema); it prints one JSON response on stdout and exits 0, or exits
// non-zero with its reason on stderr. Every call has a timeout.
package driver

import (
	"context"
	"encoding/json"
	"fmt"
)

// Bootstrap is what a new host needs to join: the server to reach, and the
// one-time join token minted for this machine alone (it pins the CA).
type Bootstrap struct {
	// ServerURL is the server the agent joins.
	ServerURL string `json:"serverURL"`
	// Token is a single-use join token bound to this machine. A secret:
	// a driver hands it to the host and never logs or stores it.
	Token string `json:"token"`
	// Script is the command that installs and starts the agent on a host
	// that can reach ServerURL (install.sh with the token in its environment).
	Script string `json:"script"`
}

// CreateRequest asks a driver to make a machine's host.
type CreateRequest struct {
	// Name is the Machine's name; the agent joins under it. A driver must
	// be idempotent by name: a create repeated after a server crash makes
	// no second host.
	Name      string            `json:"name"`
	Config    map[string]string `json:"config,omitempty"`
	Bootstrap Bootstrap         `json:"bootstrap"`
}

// State is what a driver returned for a host it made (instance id,
// addresses, a process id), handed back on remove and status. Kept on the
// Machine, so never a secret.
type State map[string]string

// HostRequest names an existing host for remove and status.
type HostRequest struct {
	Name   string            `json:"name"`
	Config map[string]string `json:"config,omitempty"`
	State  State             `json:"state,omitempty"`
}

// Status is a driver's view of a host.
type Status struct {
	// Exists is false when the host is gone (removed, or never made).
	Exists bool `json:"exists"`
}

// Driver makes and removes hosts.
type Driver interface {
	// Schema is the config the driver accepts; pools are checked against
	// it at admission.
	Schema(ctx context.Context) (Schema, error)
	// Create makes the host of req.Name, or returns the existing one's state.
	Create(ctx context.Context, req CreateRequest) (State, error)
	// Remove tears the host down; removing a host that does not exist succeeds.
	Remove(ctx context.Context, req HostRequest) error
	// Status says whether the host exists.
	Status(ctx context.Context, req HostRequest) (Status, error)
}

// Registry finds drivers by name: built-in ones first, then executables.
type Registry struct {
	builtin map[string]Driver
	// Dir holds the executable drivers (muster-driver-NAME); empty for none.
	Dir string
}

// NewRegistry returns a registry with the given built-in drivers.
func NewRegistry(dir string, builtin map[string]Driver) *Registry {
	return &Registry{builtin: builtin, Dir: dir}
}

// Lookup returns the driver called name.
func (r *Registry) Lookup(name string) (Driver, error) {
	if d, ok := r.builtin[name]; ok {
		return d, nil
	}
	if r.Dir == "" {
		return nil, fmt.Errorf("no driver %q: the built-in drivers are %v, and the server has no --drivers-dir for others", name, r.names())
	}
	return newExecutable(r.Dir, name)
}

func (r *Registry) names() []string {
	var n []string
	for k := range r.builtin {
		n = append(n, k)
	}
	return n
}

// EncodeState and DecodeState keep State in the Machine's annotation.
func EncodeState(s State) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// DecodeState reads what EncodeState wrote; an empty string is no state.
func DecodeState(v string) (State, error) {
	if v == "" {
		return nil, nil
	}
	var s State
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, fmt.Errorf("the machine's driver state is not JSON: %w", err)
	}
	return s, nil
}

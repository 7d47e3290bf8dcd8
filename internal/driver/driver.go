// Package driver is how the server creates and removes the hosts of the
// machines it provisions itself (MachinePools): a small protocol any
// infrastructure can implement as an executable, and the built-in drivers.
//
// An executable driver is muster-driver-NAME in the server's drivers dir,
// called as `muster-driver-NAME schema|validate|create|remove|status` with
// one JSON request on stdin (`{}` for schema); it prints one JSON response
// on stdout and exits 0, or exits non-zero with its reason on stderr. Every
// call has a timeout. `validate` (a HostRequest with the config alone) is
// asked only of a driver whose schema says "validates": true; exit 0
// accepts the config, any other exit refuses it with stderr as the reason.
package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
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

// Validator is a driver that can say, before making anything, whether a
// config is one it will accept: the one decision point admission (every
// pool write) and create share. Validate returns a *ConfigError for a
// config the driver refuses, any other error when it could not decide.
type Validator interface {
	Validate(ctx context.Context, config map[string]string) error
}

// ConfigError is a config a driver refuses: permanent, since the same
// config is refused again on every call. Key names the offending
// driverConfig key when the driver knows it.
type ConfigError struct {
	Key, Value, Reason string
}

func (e *ConfigError) Error() string { return e.Reason }

// Registry finds drivers by name: built-in ones first, then executables.
type Registry struct {
	builtin map[string]Driver
	// disabled are built-in drivers this server does not offer, with how
	// an admin turns each on: a pool naming one is refused saying so.
	disabled map[string]string
	// Dir holds the executable drivers (muster-driver-NAME); empty for none.
	Dir string
	// schemas caches what executables printed for `schema`, so that
	// admission does not fork a driver on every pool write.
	schemas schemaCache
}

// NewRegistry returns a registry with the given built-in drivers.
func NewRegistry(dir string, builtin map[string]Driver) *Registry {
	return &Registry{builtin: builtin, Dir: dir}
}

// Add offers a built-in driver the server turned on at start.
func (r *Registry) Add(name string, d Driver) {
	if r.builtin == nil {
		r.builtin = map[string]Driver{}
	}
	r.builtin[name] = d
	delete(r.disabled, name)
}

// Disable names a built-in driver this server does not offer and how an
// admin enables it. It is not listed, and a pool naming it is refused with
// enable in the message; an executable of the same name in Dir is not
// used either, so the name keeps one meaning.
func (r *Registry) Disable(name, enable string) {
	if r.disabled == nil {
		r.disabled = map[string]string{}
	}
	r.disabled[name] = enable
}

// UnknownError is a driver name the registry has no driver for. Admission
// refuses such a pool naming the drivers there are.
type UnknownError struct {
	Name string
	// Reason says why name is no driver (missing, not executable, not a
	// valid name).
	Reason string
	// Available are the drivers the registry has.
	Available []string
	// Dir is the drivers dir, empty when the server has none.
	Dir string
}

func (e *UnknownError) Error() string {
	msg := fmt.Sprintf("no driver %q (%s); the drivers are %s", e.Name, e.Reason, strings.Join(e.Available, ", "))
	if strings.HasPrefix(e.Reason, "the built-in driver is not enabled") {
		return msg
	}
	if e.Dir == "" {
		return msg + "; the server has no --drivers-dir for executable drivers"
	}
	return msg + fmt.Sprintf("; add an executable %s to offer another", filepath.Join(e.Dir, "muster-driver-"+e.Name))
}

// Lookup returns the driver called name; the error is an *UnknownError
// when there is none.
func (r *Registry) Lookup(name string) (Driver, error) {
	if d, ok := r.builtin[name]; ok {
		return d, nil
	}
	if enable, ok := r.disabled[name]; ok {
		return nil, &UnknownError{Name: name, Reason: "the built-in driver is not enabled on this server: " + enable, Available: r.Names(), Dir: r.Dir}
	}
	if r.Dir == "" {
		return nil, &UnknownError{Name: name, Reason: "not built in", Available: r.Names()}
	}
	d, err := newExecutable(r.Dir, name)
	if err != nil {
		return nil, &UnknownError{Name: name, Reason: err.Error(), Available: r.Names(), Dir: r.Dir}
	}
	return d, nil
}

// Names lists the drivers: the built-in ones and every executable
// muster-driver-NAME in Dir, sorted.
func (r *Registry) Names() []string {
	var n []string
	for k := range r.builtin {
		n = append(n, k)
	}
	if r.Dir != "" {
		entries, _ := os.ReadDir(r.Dir) // an unreadable dir has no drivers; Lookup says why
		for _, e := range entries {
			name, ok := strings.CutPrefix(e.Name(), "muster-driver-")
			if _, off := r.disabled[name]; !ok || r.builtin[name] != nil || off {
				continue
			}
			if _, err := newExecutable(r.Dir, name); err == nil {
				n = append(n, name)
			}
		}
	}
	sort.Strings(n)
	return n
}

// SchemaTimeout bounds a driver's schema call: it runs while a client
// waits for its pool write, and printing a fixed document is quick.
const SchemaTimeout = 10 * time.Second

// Schema returns the schema of the driver called name. An executable's is
// cached by path and modification time, so it is asked once per version
// of the file. The error is an *UnknownError when there is no such driver,
// otherwise it says the driver failed and how to fix it.
func (r *Registry) Schema(ctx context.Context, name string) (Schema, error) {
	d, err := r.Lookup(name)
	if err != nil {
		return Schema{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, SchemaTimeout)
	defer cancel()
	e, ok := d.(executable)
	if !ok {
		return d.Schema(ctx)
	}
	return r.schemas.get(ctx, e)
}

// ValidateTimeout bounds a driver's validate call: it runs while a client
// waits for its pool write, and a check of a config makes nothing.
const ValidateTimeout = 10 * time.Second

// Validate asks the driver called name whether it accepts config: nil
// when it does (or cannot be asked: an executable whose schema does not
// say it validates), a *ConfigError when it refuses, another error when
// it could not decide (it failed or timed out).
func (r *Registry) Validate(ctx context.Context, name string, config map[string]string) error {
	d, err := r.Lookup(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ValidateTimeout)
	defer cancel()
	if e, ok := d.(executable); ok {
		s, err := r.schemas.get(ctx, e)
		if err != nil {
			return err
		}
		if !s.Validates {
			return nil
		}
	}
	v, ok := d.(Validator)
	if !ok {
		return nil
	}
	return v.Validate(ctx, config)
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

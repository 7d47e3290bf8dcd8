package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// callTimeout bounds one call of an executable driver.
const callTimeout = 5 * time.Minute

// maxOutput bounds what a driver may print, so a broken one cannot make
// the server hold gigabytes.
const maxOutput = 1 << 20

type executable struct{ path string }

// newExecutable finds muster-driver-name in dir; the error is the reason
// there is none, which Lookup wraps in an UnknownError.
func newExecutable(dir, name string) (Driver, error) {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return nil, fmt.Errorf("not a valid driver name: %s", msgs[0])
	}
	path := filepath.Join(dir, "muster-driver-"+name)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%s is missing or not an executable file", path)
	}
	return executable{path: path}, nil
}

func (e executable) call(ctx context.Context, verb string, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, e.path, verb)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A driver's children (a shell script's sleep) may hold its output
	// open after it is killed; stop waiting for them soon after the timeout.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%s %s: %s", filepath.Base(e.path), verb, msg)
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(stdout.Bytes(), resp); err != nil {
		return fmt.Errorf("%s %s printed no JSON response: %w", filepath.Base(e.path), verb, err)
	}
	return nil
}

func (e executable) Schema(ctx context.Context) (Schema, error) {
	var s Schema
	if err := e.call(ctx, "schema", struct{}{}, &s); err != nil {
		return Schema{}, err
	}
	if err := s.Valid(); err != nil {
		return Schema{}, fmt.Errorf("%s schema: %w", filepath.Base(e.path), err)
	}
	return s, nil
}

// Validate asks the driver whether it accepts config. A non-zero exit is
// a refusal, unless the call was cut by its timeout or the server.
func (e executable) Validate(ctx context.Context, config map[string]string) error {
	err := e.call(ctx, "validate", HostRequest{Config: config}, nil)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s validate did not answer within %s: %w", filepath.Base(e.path), ValidateTimeout, ctx.Err())
	}
	return &ConfigError{Reason: err.Error()}
}

func (e executable) Create(ctx context.Context, req CreateRequest) (State, error) {
	var s State
	return s, e.call(ctx, "create", req, &s)
}

func (e executable) Remove(ctx context.Context, req HostRequest) error {
	return e.call(ctx, "remove", req, nil)
}

func (e executable) Status(ctx context.Context, req HostRequest) (Status, error) {
	var s Status
	return s, e.call(ctx, "status", req, &s)
}

// capped keeps the first maxOutput bytes written to it.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.Len(); room > 0 {
		if len(p) > room {
			c.Buffer.Write(p[:room])
		} else {
			c.Buffer.Write(p)
		}
	}
	return len(p), nil
}

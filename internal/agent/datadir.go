package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/muster-io/muster/internal/atomicfile"

	"github.com/muster-io/muster/internal/nodepassword"
)

// Files in the agent's data dir. Everything secret is 0600 in a 0700 dir.
const (
	nodePasswordFile = "node-password"
	clientIDFile     = "client-id"
	nodeIDFile       = "node-id"
	tokenFile        = "token"
	keyFile          = "client.key"
	certFile         = "client.crt"
	caFile           = "ca.crt"
	serverFile       = "server"
	// appliedPlanFile holds the checksum of the plan last applied on this
	// machine (plan.go): what the server's record is checked against.
	appliedPlanFile = "applied-plan"
)

// dataDir is the agent's state on disk.
type dataDir string

func (d dataDir) path(name string) string { return filepath.Join(string(d), name) }

func (d dataDir) read(name string) (string, error) {
	b, err := os.ReadFile(d.path(name))
	return strings.TrimSpace(string(b)), err
}

func (d dataDir) write(name string, data []byte) error {
	return atomicfile.Write(d.path(name), data, 0o600)
}

// readOrCreate returns the value kept in name, generating it on first use:
// the node password, the clientID and the node-id must survive restarts.
func (d dataDir) readOrCreate(name string, generate func() (string, error)) (string, error) {
	v, err := d.read(name)
	if err == nil && v != "" {
		return v, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", d.path(name), err)
	}
	if v, err = generate(); err != nil {
		return "", err
	}
	if err := d.write(name, []byte(v+"\n")); err != nil {
		return "", fmt.Errorf("writing %s: %w; choose a writable --data-dir", d.path(name), err)
	}
	return v, nil
}

func randomHex(bytes int) func() (string, error) {
	return func() (string, error) {
		b := make([]byte, bytes)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return hex.EncodeToString(b), nil
	}
}

// nodeCredentials are what the agent presents about itself when it registers: its node name, node password and clientID.
type nodeCredentials struct {
	nodeName, nodePassword, clientID string
}

func (d dataDir) credentials(nodeName string, withNodeID bool) (nodeCredentials, error) {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return nodeCredentials{}, fmt.Errorf("creating data dir %s: %w; choose a writable --data-dir", d, err)
	}
	pw, err := d.readOrCreate(nodePasswordFile, nodepassword.Generate)
	if err != nil {
		return nodeCredentials{}, err
	}
	if err := nodepassword.Validate(pw); err != nil {
		return nodeCredentials{}, fmt.Errorf("%s: %w", d.path(nodePasswordFile), err)
	}
	id, err := d.readOrCreate(clientIDFile, randomHex(16))
	if err != nil {
		return nodeCredentials{}, err
	}
	if withNodeID {
		suffix, err := d.readOrCreate(nodeIDFile, randomHex(4))
		if err != nil {
			return nodeCredentials{}, err
		}
		nodeName = nodeName + "-" + suffix
	}
	return nodeCredentials{nodeName: nodeName, nodePassword: pw, clientID: id}, nil
}

// Joined says whether dir holds a machine certificate: an agent started
// there needs no join token. muster-server --with-agent asks, so that it
// mints a token for its own host only for the first join.
func Joined(dir string) bool {
	fi, err := os.Stat(dataDir(dir).path(certFile))
	return err == nil && fi.Size() > 0
}

package snapshot

import (
	"errors"
	"fmt"
	"os"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/datadir"
	"github.com/muster-io/muster/internal/pki"
)

// DeploymentOf is the identity of the deployment whose data dir dataDir
// is: the SHA-256 of its CA certificate (tls/ca.crt), as in its join
// tokens; "" for a data dir without a CA (a new one, or a command run
// away from the server's data dir).
func DeploymentOf(dataDir string) (string, error) {
	l, err := datadir.New(dataDir)
	if err != nil {
		return "", err
	}
	ca, err := os.ReadFile(l.CACert)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the data dir's CA to tell which deployment it belongs to: %w", err)
	}
	return pki.Hash(ca), nil
}

// CheckTarget refuses to restore a snapshot into the data dir of another
// deployment, before anything is written. A data dir without a CA (a new
// one) takes any snapshot; its server then needs the token of the
// snapshot's deployment (--token-file). A data dir with a CA takes only
// its own deployment's snapshots: by the CA the snapshot records, and by
// its server token opening the snapshot's sealed CA (a version 1 snapshot
// records no CA; and a token rotated after the snapshot was taken no
// longer opens it, which would stop the server at its start).
func CheckTarget(c *Contents, dataDir string) error {
	have, err := DeploymentOf(dataDir)
	if err != nil || have == "" {
		return err
	}
	if c.Deployment != nil && c.Deployment.CA != have {
		return fmt.Errorf("the snapshot is of another deployment: its cluster CA has sha256 %s, the CA of --data-dir %s has sha256 %s; nothing was written. "+
			"Restore it into a new, empty --data-dir and start muster-server there with the server token of the snapshot's deployment (--token-file), "+
			"or give the data dir of the deployment the snapshot was taken of", c.Deployment.CA, dataDir, have)
	}
	token, err := bootstrap.ReadToken(dataDir)
	if err != nil || token == "" {
		return err
	}
	for _, e := range c.Entries {
		if e.Key != bootstrap.SharedCAKey {
			continue
		}
		if _, err := bootstrap.OpenCA(token, e.Value); errors.Is(err, bootstrap.ErrWrongToken) {
			return fmt.Errorf("the server token of --data-dir %s does not open the snapshot's sealed cluster CA: the snapshot is of another deployment, "+
				"or the token was rotated after it was taken; nothing was written. Restore it into a new, empty --data-dir and start muster-server there "+
				"with the server token the snapshot's deployment had when it was taken (--token-file)", dataDir)
		}
	}
	return nil
}

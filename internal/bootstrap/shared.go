package bootstrap

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/datadir"

	"github.com/muster-io/muster/internal/atomicfile"

	"github.com/muster-io/muster/internal/pki"
)

// The servers of an HA deployment share one CA: the first server on an
// empty datastore stores its CA there, sealed with a key derived from the
// server token, and every later server with the same token opens it. The
// datastore never holds the CA key in the clear, and a server with a
// different token can neither read it nor replace it.

// SharedCAKey is the datastore key of the sealed CA, outside the API's
// key space so that no API request can read it.
const SharedCAKey = "/muster/bootstrap/ca"

const (
	sealVersion = 1
	// pbkdf2Iterations makes each guess at a stolen blob's token cost
	// milliseconds; the server token itself has 256 bits when generated.
	pbkdf2Iterations = 200_000
	sealAAD          = "muster.io/bootstrap/ca/v1"
)

// ErrWrongToken means the sealed CA was sealed with another server token.
var ErrWrongToken = errors.New("the datastore's cluster CA was sealed with a different server token")

// SharedCA is what the servers share: the CA's certificate and key, PEM.
// During a CA rotation ('muster-server certificate rotate-ca') CertPEM and
// KeyPEM are the new CA, which signs every certificate from then on, and
// Retiring is the old one, still trusted (and still signing the servers'
// serving certificates, which agents that hold only the old CA verify)
// until 'rotate-ca --retire' drops it.
type SharedCA struct {
	CertPEM  []byte      `json:"cert"`
	KeyPEM   []byte      `json:"key"`
	Retiring *RetiringCA `json:"retiring,omitempty"`
}

// RetiringCA is the CA a rotation replaces, trusted until it is retired.
type RetiringCA struct {
	CertPEM []byte `json:"cert"`
	KeyPEM  []byte `json:"key"`
}

type sealed struct {
	Version int    `json:"version"`
	Salt    []byte `json:"salt"`
	Nonce   []byte `json:"nonce"`
	Data    []byte `json:"data"`
}

// SealCA encrypts the CA with AES-256-GCM under a key derived from token.
func SealCA(token string, ca *pki.CA) ([]byte, error) {
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	return SealShared(token, &SharedCA{CertPEM: ca.CertPEM, KeyPEM: keyPEM})
}

// SealShared encrypts the whole shared record (with a retiring CA, if a
// rotation is under way) as SealCA does.
func SealShared(token string, shared *SharedCA) ([]byte, error) {
	plain, err := json.Marshal(shared)
	if err != nil {
		return nil, err
	}
	s := sealed{Version: sealVersion, Salt: make([]byte, 16)}
	if _, err := rand.Read(s.Salt); err != nil {
		return nil, err
	}
	aead, err := tokenAEAD(token, s.Salt)
	if err != nil {
		return nil, err
	}
	s.Nonce = make([]byte, aead.NonceSize())
	if _, err := rand.Read(s.Nonce); err != nil {
		return nil, err
	}
	s.Data = aead.Seal(nil, s.Nonce, plain, []byte(sealAAD))
	return json.Marshal(s)
}

// OpenCA decrypts what SealCA made; ErrWrongToken if token is not the one it was sealed with.
func OpenCA(token string, blob []byte) (*SharedCA, error) {
	var s sealed
	if err := json.Unmarshal(blob, &s); err != nil || s.Version != sealVersion {
		return nil, fmt.Errorf("the sealed cluster CA in the datastore (key %s) is not in a format this server knows (version %d): upgrade muster-server to the version the other servers run", SharedCAKey, s.Version)
	}
	aead, err := tokenAEAD(token, s.Salt)
	if err != nil {
		return nil, err
	}
	plain, err := aead.Open(nil, s.Nonce, s.Data, []byte(sealAAD))
	if err != nil {
		return nil, ErrWrongToken
	}
	var ca SharedCA
	if err := json.Unmarshal(plain, &ca); err != nil {
		return nil, fmt.Errorf("the sealed cluster CA decrypted but is malformed: %w", err)
	}
	if _, err := pki.LoadCA(ca.CertPEM, ca.KeyPEM); err != nil {
		return nil, fmt.Errorf("the sealed cluster CA decrypted but does not load: %w", err)
	}
	if r := ca.Retiring; r != nil {
		if _, err := pki.LoadCA(r.CertPEM, r.KeyPEM); err != nil {
			return nil, fmt.Errorf("the sealed cluster CA's retiring CA decrypted but does not load: %w", err)
		}
	}
	return &ca, nil
}

func tokenAEAD(token string, salt []byte) (cipher.AEAD, error) {
	key, err := pbkdf2.Key(sha256.New, token, salt, pbkdf2Iterations, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// InstallCA puts the shared CA in the data dir before Ensure runs, so that
// Ensure issues this server's certificates from it. A data dir without a CA
// takes it; one holding the same CA is left alone; one holding another CA
// is refused unless replace is set (the CA was generated moments ago by
// this very start and lost the race to seal its own).
func InstallCA(dataDir string, ca *SharedCA, replace bool) error {
	files, err := datadir.New(dataDir)
	if err != nil {
		return err
	}
	have, err := readOptional(files.CACert)
	if err != nil {
		return err
	}
	// The data dir's CA is the one a rotation retires: this server has
	// not started since 'certificate rotate-ca' staged the new one.
	rotated := ca.Retiring != nil && bytes.Equal(have, ca.Retiring.CertPEM)
	switch {
	case have != nil && bytes.Equal(have, ca.CertPEM):
		return installRetiring(files, ca.Retiring)
	case have != nil && !replace && !rotated:
		return fmt.Errorf("the data dir's CA (%s, sha256 %s) is not the CA the other servers on this datastore share (sha256 %s): "+
			"this data dir belongs to another deployment. Start this server with an empty --data-dir to join the deployment, "+
			"or point it at its own datastore. If 'muster-server certificate rotate-ca' was run and retired without this server starting in between, "+
			"move %s and %s away (its agents then join again)", files.CACert, pki.Hash(have), pki.Hash(ca.CertPEM), files.CACert, files.CAKey)
	}
	if err := prepareDirs(files); err != nil {
		return err
	}
	if err := installRetiring(files, ca.Retiring); err != nil {
		return err
	}
	if err := atomicfile.Write(files.CAKey, ca.KeyPEM, secretMode); err != nil {
		return err
	}
	if err := atomicfile.Write(files.CACert, ca.CertPEM, certMode); err != nil {
		return err
	}
	if rotated {
		klog.InfoS("Installed the rotated cluster CA: it signs from now on, and the previous CA stays trusted until 'muster-server certificate rotate-ca --retire'",
			"hash", pki.Hash(ca.CertPEM), "retiring", pki.Hash(ca.Retiring.CertPEM))
	}
	return nil
}

// installRetiring keeps the data dir's retiring CA in step with the shared
// record: written while a rotation is under way, removed once it is retired.
func installRetiring(files Files, r *RetiringCA) error {
	if r == nil {
		for _, f := range []string{files.RetiringCACert, files.RetiringCAKey} {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing the retired CA %s: %w", f, err)
			}
		}
		return nil
	}
	if err := atomicfile.Write(files.RetiringCAKey, r.KeyPEM, secretMode); err != nil {
		return err
	}
	return atomicfile.Write(files.RetiringCACert, r.CertPEM, certMode)
}

// ReadToken returns the server token kept in the data dir, "" if there is none.
func ReadToken(dataDir string) (string, error) {
	files, err := datadir.New(dataDir)
	if err != nil {
		return "", err
	}
	b, err := readOptional(files.Token)
	if err != nil || b == nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// NewToken generates a server token: 256 random bits, hex.
func NewToken() (string, error) {
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generating the server token: %w", err)
	}
	return fmt.Sprintf("%x", raw), nil
}

// Reseal opens the sealed CA with oldToken and seals it again with
// newToken: the same CA, so every certificate it issued stays valid.
func Reseal(oldToken, newToken string, blob []byte) ([]byte, error) {
	if err := validToken(newToken); err != nil {
		return nil, err
	}
	shared, err := OpenCA(oldToken, blob)
	if err != nil {
		return nil, err
	}
	// The whole record, a retiring CA included: a token rotation in the
	// middle of a CA rotation must not drop the CA the agents still hold.
	return SealShared(newToken, shared)
}

// WriteToken replaces the server token kept in the data dir (mode 0600).
func WriteToken(dataDir, token string) error {
	if err := validToken(token); err != nil {
		return err
	}
	files, err := datadir.New(dataDir)
	if err != nil {
		return err
	}
	return atomicfile.Write(files.Token, []byte(token+"\n"), secretMode)
}

func validToken(token string) error {
	if len(token) < minTokenLen || strings.ContainsAny(token, " \t\r\n") {
		return fmt.Errorf("the new server token is too short or has whitespace: give at least %d characters on one line (muster-server generates 64 hex characters: openssl rand -hex 32)", minTokenLen)
	}
	return nil
}

// Package datadir is the one description of a muster-server's data dir:
// where each thing it keeps lives (Layout), and the lock that makes it one
// server's (Lock). Every package that reads or writes the data dir takes
// its paths from here, so the layout is written down once.
package datadir

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Layout is the absolute path of everything a server keeps in its data dir.
type Layout struct {
	Dir    string // the data dir itself, 0700
	TLSDir string // <Dir>/tls: the CA and the server's certificates
	// CACert and CAKey are the deployment's CA (the key 0600).
	CACert string
	CAKey  string
	// RetiringCACert and RetiringCAKey are the CA a rotation replaces
	// (muster-server certificate rotate-ca), present only until it is
	// retired; CABundle is every CA the server trusts (the current one and
	// the retiring one), what /cacerts serves and client certificates are
	// verified against.
	RetiringCACert string
	RetiringCAKey  string
	CABundle       string
	// ServingCert and ServingKey are this server's HTTPS certificate.
	ServingCert string
	ServingKey  string
	// AdminCert and AdminKey are the admin client certificate
	// (system:masters) AdminKubeconfig holds.
	AdminCert       string
	AdminKey        string
	AdminKubeconfig string
	// Token is the server token (0600), which seals the shared CA.
	Token string
	// Lock is the file Lock holds an flock on while a server (or an
	// offline datastore command) uses the dir; it holds that process's pid.
	Lock string
	// DBDir and SQLite are the embedded datastore: <Dir>/db/state.db.
	DBDir  string
	SQLite string
	// KineSocket is the in-process kine's unix socket (0600), which the
	// datastore commands also reach a running server's datastore through.
	KineSocket string
	// HostAgent is the data dir of the host's own agent (--with-agent).
	HostAgent string
	// SSHDriverKeys holds the ssh pool driver's key pair.
	SSHDriverKeys string
	// AuditPolicy is the default audit policy (internal/auditpolicy),
	// written at each start when an audit backend is on and no
	// --audit-policy-file is given: what is in force, to read or copy.
	AuditPolicy string
}

// KineSocketName is the kine socket's file name, in the data dir or in
// the directory a command gives kine instead.
const KineSocketName = "kine.sock"

// AdminKubeconfigName is the admin kubeconfig's file name, which client
// commands look for in a data dir (internal/kubeconfig).
const AdminKubeconfigName = "admin.kubeconfig"

// New returns the layout of the data dir dir, made absolute, without
// touching the disk.
func New(dir string) (Layout, error) {
	if dir == "" {
		return Layout{}, errors.New("data dir is empty: pass --data-dir")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, fmt.Errorf("data dir %q: %w", dir, err)
	}
	tls := filepath.Join(abs, "tls")
	db := filepath.Join(abs, "db")
	return Layout{
		Dir:             abs,
		TLSDir:          tls,
		CACert:          filepath.Join(tls, "ca.crt"),
		CAKey:           filepath.Join(tls, "ca.key"),
		RetiringCACert:  filepath.Join(tls, "ca-retiring.crt"),
		RetiringCAKey:   filepath.Join(tls, "ca-retiring.key"),
		CABundle:        filepath.Join(tls, "ca-bundle.crt"),
		ServingCert:     filepath.Join(tls, "serving.crt"),
		ServingKey:      filepath.Join(tls, "serving.key"),
		AdminCert:       filepath.Join(tls, "admin.crt"),
		AdminKey:        filepath.Join(tls, "admin.key"),
		AdminKubeconfig: filepath.Join(abs, AdminKubeconfigName),
		Token:           filepath.Join(abs, "token"),
		Lock:            filepath.Join(abs, ".lock"),
		DBDir:           db,
		SQLite:          filepath.Join(db, "state.db"),
		KineSocket:      filepath.Join(abs, KineSocketName),
		HostAgent:       filepath.Join(abs, "agent"),
		SSHDriverKeys:   filepath.Join(abs, "drivers", "ssh"),
		AuditPolicy:     filepath.Join(abs, "audit-policy.yaml"),
	}, nil
}

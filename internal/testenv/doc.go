// Package testenv holds the real parts tests start, one package each, kept
// apart from the production packages: PostgreSQL (pgtest), a TLS etcd
// (etcdtest) and an sshd (sshtest). Only tests import them.
package testenv

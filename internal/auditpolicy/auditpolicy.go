// Package auditpolicy is Muster's default audit policy: what the
// apiserver's own audit (k8s.io/apiserver, --audit-* flags) records when
// an operator turns a backend on without a policy of their own.
package auditpolicy

import (
	_ "embed"
	"fmt"

	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/muster-io/muster/internal/atomicfile"
)

// Default is the policy, in kube-apiserver's file format (audit.k8s.io/v1).
//
//go:embed default-policy.yaml
var Default []byte

// Enabled says whether opts sends audit events anywhere.
func Enabled(opts *genericoptions.AuditOptions) bool {
	return opts != nil && (opts.LogOptions.Path != "" || opts.WebhookOptions.ConfigFile != "")
}

// Resolve gives opts the default policy when a backend is on and no
// --audit-policy-file was given: it writes Default to path (0600) and
// points opts at it. The apiserver's options load a policy only from a
// file, and with none they record nothing at all, which an operator who
// gave only --audit-log-path would not expect.
func Resolve(opts *genericoptions.AuditOptions, path string) error {
	if !Enabled(opts) || opts.PolicyFile != "" {
		return nil
	}
	if err := atomicfile.Write(path, Default, 0o600); err != nil {
		return fmt.Errorf("writing the default audit policy to %s: %w (give a policy of your own with --audit-policy-file)", path, err)
	}
	opts.PolicyFile = path
	return nil
}

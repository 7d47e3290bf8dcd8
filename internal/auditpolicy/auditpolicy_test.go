package auditpolicy

import (
	"os"
	"path/filepath"
	"testing"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/muster-io/muster/internal/caller"
)

// TestDefaultPolicyLevels says, request by request, what the default policy
// records: the issue's "metadata for every write and every exec /
// port-forward / log, request bodies for tokens without their secrets,
// nothing for agents' heartbeats, status reports and watches".
func TestDefaultPolicyLevels(t *testing.T) {
	p, err := policy.LoadPolicyFromBytes(Default)
	if err != nil {
		t.Fatalf("the default policy does not load as kube-apiserver would: %v", err)
	}
	eval := policy.NewPolicyRuleEvaluator(p)
	machineName, machineGroups := caller.MachineSubject("m1", "uid-1", "c1")
	agent := &user.DefaultInfo{Name: machineName, Groups: machineGroups}
	joiner := &user.DefaultInfo{Name: caller.BootstrapUser("abc123"), Groups: []string{caller.BootstrappersGroup}}
	operator := &user.DefaultInfo{Name: "ann", Groups: []string{caller.OperatorsGroup}}
	serverName, serverGroups := caller.ServerSubject("s2")
	peer := &user.DefaultInfo{Name: serverName, Groups: serverGroups}
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	res := func(u user.Info, verb, resource, sub string) authorizer.Attributes {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: "muster.io", APIVersion: "v1alpha1", Resource: resource, Subresource: sub, Name: "x", ResourceRequest: true}
	}
	path := func(u user.Info, verb, p string) authorizer.Attributes {
		return authorizer.AttributesRecord{User: u, Verb: verb, Path: p}
	}
	for _, c := range []struct {
		name  string
		attrs authorizer.Attributes
		want  auditinternal.Level
	}{
		{"agent watches its plan", res(agent, "watch", "machineplans", ""), auditinternal.LevelNone},
		{"agent reads its machine", res(agent, "get", "machines", ""), auditinternal.LevelNone},
		{"agent reports its machine's status", res(agent, "update", "machines", "status"), auditinternal.LevelNone},
		{"agent reports its plan's status", res(agent, "patch", "machineplans", "status"), auditinternal.LevelNone},
		{"server reports liveness to a peer", path(peer, "post", "/liveness"), auditinternal.LevelNone},
		{"join: a registration with a join token (holds a node password)", res(joiner, "create", "clusterregistrations", ""), auditinternal.LevelMetadata},
		{"joiner polls its registration", res(joiner, "get", "clusterregistrations", ""), auditinternal.LevelNone},
		{"operator creates a join token", res(operator, "create", "clusterregistrationtokens", ""), auditinternal.LevelRequest},
		{"operator revokes a join token", res(operator, "delete", "clusterregistrationtokens", ""), auditinternal.LevelRequest},
		{"admin grants a team an access binding", res(operator, "create", "accessbindings", ""), auditinternal.LevelRequest},
		{"controller writes a token's status", res(peer, "update", "clusterregistrationtokens", "status"), auditinternal.LevelMetadata},
		{"operator writes a plan (holds secrets)", res(operator, "update", "machineplans", ""), auditinternal.LevelMetadata},
		{"operator writes a plan set (holds secrets)", res(operator, "patch", "machineplansets", ""), auditinternal.LevelMetadata},
		{"operator writes a cluster (may hold an API credential)", res(operator, "create", "clusters", ""), auditinternal.LevelMetadata},
		{"operator approves a registration", res(operator, "update", "clusterregistrations", "status"), auditinternal.LevelMetadata},
		{"operator deletes a machine", res(operator, "delete", "machines", ""), auditinternal.LevelMetadata},
		{"operator execs on a machine", res(operator, "create", "machines", "exec"), auditinternal.LevelMetadata},
		{"operator port-forwards to a machine", res(operator, "create", "machines", "portforward"), auditinternal.LevelMetadata},
		{"operator reads a machine's log", res(operator, "get", "machines", "log"), auditinternal.LevelMetadata},
		{"operator reads a plan", res(operator, "get", "machineplans", ""), auditinternal.LevelMetadata},
		{"operator lists machines", res(operator, "list", "machines", ""), auditinternal.LevelNone},
		{"operator watches machines", res(operator, "watch", "machines", ""), auditinternal.LevelNone},
		{"console sign-in (body holds a console token)", path(anonymous, "post", "/console/session"), auditinternal.LevelMetadata},
		{"console token minting (answer holds the token)", path(operator, "post", "/console/tokens"), auditinternal.LevelMetadata},
		{"health checks", path(anonymous, "get", "/readyz"), auditinternal.LevelNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := eval.EvaluatePolicyRule(c.attrs).Level; got != c.want {
				t.Errorf("level %s, want %s", got, c.want)
			}
		})
	}
	// No rule may record a response: a join's answer, a console token's
	// minting, a plan read by an operator all carry secrets.
	for i, r := range p.Rules {
		if r.Level == auditinternal.LevelRequestResponse {
			t.Errorf("rule %d records responses (RequestResponse); responses carry secrets", i)
		}
	}
}

// TestResolve: a backend without a policy gets the default one, written
// 0600 where the server said; a policy of the operator's own is kept.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit-policy.yaml")

	off := genericoptions.NewAuditOptions()
	if err := Resolve(off, path); err != nil || off.PolicyFile != "" {
		t.Fatalf("no backend: policy %q, err %v; want none", off.PolicyFile, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("no backend, yet a policy was written: %v", err)
	}

	logOnly := genericoptions.NewAuditOptions()
	logOnly.LogOptions.Path = filepath.Join(dir, "audit.log")
	if err := Resolve(logOnly, path); err != nil {
		t.Fatal(err)
	}
	if logOnly.PolicyFile != path {
		t.Fatalf("--audit-log-path alone: policy %q, want the default at %s", logOnly.PolicyFile, path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("default policy file: %v, mode %v; want 0600", err, fi.Mode())
	}

	own := genericoptions.NewAuditOptions()
	own.WebhookOptions.ConfigFile = "hook.kubeconfig"
	own.PolicyFile = "/etc/mine.yaml"
	if err := Resolve(own, filepath.Join(dir, "other.yaml")); err != nil || own.PolicyFile != "/etc/mine.yaml" {
		t.Fatalf("an operator's policy was replaced: %q, %v", own.PolicyFile, err)
	}
}

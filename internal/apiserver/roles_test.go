package apiserver

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
)

func TestBuiltinRoles(t *testing.T) {
	res := func(group, verb, resource, sub string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{ResourceRequest: true, Verb: verb, APIGroup: "muster.io", Resource: resource, Subresource: sub, Name: "x"}
	}
	path := func(verb, p string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{Verb: verb, Path: p}
	}
	core := func(verb, resource string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{ResourceRequest: true, Verb: verb, Resource: resource}
	}
	cases := []struct {
		name  string
		group string
		attrs authorizer.AttributesRecord
		allow bool
	}{
		{"viewer lists machines", caller.ViewersGroup, res("", "list", "machines", ""), true},
		{"viewer watches plans", caller.ViewersGroup, res("", "watch", "machineplans", ""), true},
		{"viewer reads a machine's status", caller.ViewersGroup, res("", "get", "machines", "status"), true},
		{"viewer reads events", caller.ViewersGroup, core("list", "events"), true},
		{"viewer cannot read a machine's agent log", caller.ViewersGroup, res("", "get", "machines", "log"), false},
		{"viewer cannot exec", caller.ViewersGroup, res("", "create", "machines", "exec"), false},
		{"viewer cannot port-forward", caller.ViewersGroup, res("", "create", "machines", "portforward"), false},
		{"operator execs", caller.OperatorsGroup, res("", "create", "machines", "exec"), true},
		{"operator port-forwards", caller.OperatorsGroup, res("", "create", "machines", "portforward"), true},
		{"operator reads a machine's agent log", caller.OperatorsGroup, res("", "get", "machines", "log"), true},
		{"operator cannot exec with get", caller.OperatorsGroup, res("", "get", "machines", "exec"), false},
		{"viewer reads discovery", caller.ViewersGroup, path("get", "/apis/muster.io/v1alpha1"), true},
		{"viewer never reads tokens", caller.ViewersGroup, res("", "list", "clusterregistrationtokens", ""), false},
		{"viewer never reads node passwords", caller.ViewersGroup, res("", "get", "nodepasswords", ""), false},
		{"viewer cannot change a plan", caller.ViewersGroup, res("", "update", "machineplans", ""), false},
		{"viewer cannot delete a machine", caller.ViewersGroup, res("", "delete", "machines", ""), false},
		{"viewer cannot approve", caller.ViewersGroup, res("", "update", "clusterregistrations", "status"), false},
		{"viewer cannot read metrics", caller.ViewersGroup, path("get", "/metrics"), false},
		{"viewer lists drivers", caller.ViewersGroup, path("get", "/drivers"), true},
		{"viewer reads a driver's schema", caller.ViewersGroup, path("get", "/drivers/process"), true},
		{"viewer cannot post to drivers", caller.ViewersGroup, path("post", "/drivers/process"), false},
		{"operator reads a driver's schema", caller.OperatorsGroup, path("get", "/drivers/process"), true},
		{"metrics reader cannot read drivers", caller.MetricsReadersGroup, path("get", "/drivers"), false},
		{"no prefix match past /drivers", caller.ViewersGroup, path("get", "/driversx"), false},
		{"operator creates tokens", caller.OperatorsGroup, res("", "create", "clusterregistrationtokens", ""), true},
		{"operator reads tokens", caller.OperatorsGroup, res("", "list", "clusterregistrationtokens", ""), true},
		{"operator revokes tokens", caller.OperatorsGroup, res("", "patch", "clusterregistrationtokens", "status"), true},
		{"viewer cannot revoke tokens", caller.ViewersGroup, res("", "patch", "clusterregistrationtokens", "status"), false},
		{"operator approves", caller.OperatorsGroup, res("", "update", "clusterregistrations", "status"), true},
		{"operator edits plans", caller.OperatorsGroup, res("", "patch", "machineplans", ""), true},
		// A plan's secrets (issue 27): who writes plans reads them whole;
		// viewers read them redacted (internal/registry/secrets.go).
		{"operator reads a plan's secrets", caller.OperatorsGroup, res("", "get", "machineplans", "secrets"), true},
		{"operator reads a plan set's secrets", caller.OperatorsGroup, res("", "get", "machineplansets", "secrets"), true},
		{"viewer never reads a plan's secrets", caller.ViewersGroup, res("", "get", "machineplans", "secrets"), false},
		{"viewer never reads a plan set's secrets", caller.ViewersGroup, res("", "get", "machineplansets", "secrets"), false},
		{"viewer cannot list its way to them", caller.ViewersGroup, res("", "list", "machineplans", "secrets"), false},
		{"operator edits plan sets", caller.OperatorsGroup, res("", "create", "machineplansets", ""), true},
		{"operator deletes machines", caller.OperatorsGroup, res("", "delete", "machines", ""), true},
		{"operator labels machines", caller.OperatorsGroup, res("", "patch", "machines", ""), true},
		{"operator cannot write a machine's status", caller.OperatorsGroup, res("", "update", "machines", "status"), false},
		{"operator cannot write a plan's status", caller.OperatorsGroup, res("", "patch", "machineplans", "status"), false},
		{"operator cannot change server endpoints", caller.OperatorsGroup, res("", "update", "serverendpoints", ""), false},
		{"operator cannot change leases", caller.OperatorsGroup, res("", "delete", "controllerleases", ""), false},
		{"operator cannot read node passwords", caller.OperatorsGroup, res("", "list", "nodepasswords", ""), false},
		{"operator cannot create clusters", caller.OperatorsGroup, res("", "create", "clusters", ""), false},
		{"metrics reader scrapes", caller.MetricsReadersGroup, path("get", "/metrics"), true},
		{"metrics reader lists nothing", caller.MetricsReadersGroup, res("", "list", "machines", ""), false},
		{"metrics reader cannot post metrics", caller.MetricsReadersGroup, path("post", "/metrics"), false},
		{"no group, nothing", "", res("", "get", "machines", ""), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.attrs.User = &user.DefaultInfo{Name: "alice", Groups: []string{tc.group, user.AllAuthenticated}}
			decision, reason, err := Authorizer{}.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got := decision == authorizer.DecisionAllow; got != tc.allow {
				t.Fatalf("allowed = %v, want %v (reason %q)", got, tc.allow, reason)
			}
			if !tc.allow && !strings.Contains(reason, "system:masters") {
				t.Fatalf("a refusal must say which groups are granted it, got %q", reason)
			}
		})
	}
}

func TestRoleDenialNamesGrantingGroups(t *testing.T) {
	attrs := authorizer.AttributesRecord{ResourceRequest: true, Verb: "delete", APIGroup: "muster.io", Resource: "machines", Name: "m",
		User: &user.DefaultInfo{Name: "v", Groups: []string{caller.ViewersGroup}}}
	_, reason, _ := Authorizer{}.Authorize(context.Background(), attrs)
	if want := "muster grants delete machines only to groups system:masters, muster:operators"; reason != want {
		t.Fatalf("reason = %q, want %q", reason, want)
	}
}

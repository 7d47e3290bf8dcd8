package registry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

const testSecret = "s3cr3t-value-1234"

func secretSpec() api.MachinePlanSpec {
	return api.MachinePlanSpec{
		Files: []api.PlanFile{{Path: "/etc/app.env", Content: "DB_PASSWORD=" + testSecret + "\n", Mode: 0o600}, {Path: "/etc/empty"}},
		Instructions: []api.PlanInstruction{{Name: "show", Command: "/bin/sh", Args: []string{"-c", "echo " + testSecret},
			Env: []string{"DB_PASS=" + testSecret}, SaveOutput: true}},
		Probes: []api.PlanProbe{
			{Name: "exec", Exec: &api.ExecProbe{Command: "/bin/sh", Args: []string{"-c", "test " + testSecret}}},
			{Name: "http", HTTPGet: &api.HTTPGetProbe{URL: "https://admin:" + testSecret + "@db.example:8443/health?token=" + testSecret}},
			{Name: "plain", HTTPGet: &api.HTTPGetProbe{URL: "http://127.0.0.1:8080/healthz"}},
		},
	}
}

// TestRedactPlan: every value that may hold a secret reads as the marker,
// what says what the plan does stays, and the stored object (the watch
// cache's copy, shared by every reader) is never changed.
func TestRedactPlan(t *testing.T) {
	plan := &api.MachinePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{lastApplied: `{"spec":"` + testSecret + `"}`, "other": "kept"}},
		Spec:       secretSpec(),
		Status: api.MachinePlanStatus{Checksum: "abc", Output: []api.InstructionOutput{{Name: "show", Output: testSecret + "\n"}},
			Probes: []api.ProbeStatus{{Name: "exec", Message: "exit status 1: " + testSecret}}},
	}
	before, _ := json.Marshal(plan)
	got := redacted(plan).(*api.MachinePlan)
	if after, _ := json.Marshal(plan); string(after) != string(before) {
		t.Fatal("redacting changed the stored object")
	}
	out, _ := json.Marshal(got)
	if strings.Contains(string(out), testSecret) {
		t.Errorf("the redacted plan holds the secret: %s", out)
	}
	for what, pair := range map[string][2]string{
		"file content":      {got.Spec.Files[0].Content, api.Redacted},
		"empty content":     {got.Spec.Files[1].Content, ""},
		"path":              {got.Spec.Files[0].Path, "/etc/app.env"},
		"args":              {strings.Join(got.Spec.Instructions[0].Args, " "), api.Redacted + " " + api.Redacted},
		"env keeps a name":  {got.Spec.Instructions[0].Env[0], "DB_PASS=" + api.Redacted},
		"command":           {got.Spec.Instructions[0].Command, "/bin/sh"},
		"exec probe args":   {strings.Join(got.Spec.Probes[0].Exec.Args, " "), api.Redacted + " " + api.Redacted},
		"URL credentials":   {got.Spec.Probes[1].HTTPGet.URL, "https://" + api.Redacted + "@db.example:8443/health?" + api.Redacted},
		"plain URL":         {got.Spec.Probes[2].HTTPGet.URL, "http://127.0.0.1:8080/healthz"},
		"saved output":      {got.Status.Output[0].Output, api.Redacted},
		"probe message":     {got.Status.Probes[0].Message, api.Redacted},
		"last-applied":      {got.Annotations[lastApplied], api.Redacted},
		"other annotations": {got.Annotations["other"], "kept"},
		"checksum":          {got.Status.Checksum, "abc"},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s: %q, want %q", what, pair[0], pair[1])
		}
	}

	set := &api.MachinePlanSet{Spec: api.MachinePlanSetSpec{Template: secretSpec(), Drain: &api.MachinePlanSetDrain{Template: secretSpec()}},
		Status: api.MachinePlanSetStatus{LastCompleteTemplate: func() *api.MachinePlanSpec { s := secretSpec(); return &s }()}}
	list := &api.MachinePlanSetList{Items: []api.MachinePlanSet{*set}}
	if out, _ := json.Marshal(redacted(list)); strings.Contains(string(out), testSecret) {
		t.Errorf("a redacted plan set holds the secret: %s", out)
	}
}

// allowOnly is an authorizer that allows only the named user the secrets.
func allowOnly(name string) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
		if attrs.GetUser().GetName() == name && attrs.GetSubresource() == api.SecretsSubresource {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "", nil
	})
}

// TestSecretGuardAsksPerCaller: the guard asks the authorizer about the
// caller of each request; a request with no caller reads redacted.
func TestSecretGuardAsksPerCaller(t *testing.T) {
	g := secretGuard{authz: allowOnly("otto"), resource: MachinePlan.Resource}
	plan := &api.MachinePlan{Spec: secretSpec()}
	as := func(name string) context.Context {
		return request.WithUser(context.Background(), &user.DefaultInfo{Name: name})
	}
	for ctx, wantWhole := range map[context.Context]bool{as("otto"): true, as("vera"): false, context.Background(): false} {
		out, _ := json.Marshal(g.out(ctx, "m", plan))
		if whole := strings.Contains(string(out), testSecret); whole != wantWhole {
			t.Errorf("whole %v, want %v: %s", whole, wantWhole, out)
		}
	}
}

// TestRedactedWriteBackRefused: a plan read redacted and written back
// carries the marker where a secret was; the kind's validation
// (validation.ValidateMachinePlan) refuses it, naming each field.
func TestRedactedWriteBackRefused(t *testing.T) {
	// The refusals of the marker, apart from what else the plan's rules
	// say of a redacted value.
	markerErrors := func(p *api.MachinePlan) []string {
		var fields []string
		for _, e := range MachinePlan.Validate(p) {
			if strings.Contains(e.Detail, "in place of a secret") {
				fields = append(fields, e.Field)
			}
		}
		return fields
	}
	back := redacted(&api.MachinePlan{Spec: secretSpec()}).(*api.MachinePlan)
	want := "spec.files[0].content spec.instructions[0].args[0] spec.instructions[0].args[1] spec.instructions[0].env[0] spec.probes[0].exec.args[0] spec.probes[0].exec.args[1] spec.probes[1].httpGet.url"
	if got := strings.Join(markerErrors(back), " "); got != want {
		t.Errorf("refused %v, want %s", got, want)
	}
	if got := markerErrors(&api.MachinePlan{Spec: secretSpec()}); len(got) != 0 {
		t.Errorf("a plan with its real values was refused: %v", got)
	}
}

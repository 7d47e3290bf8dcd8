package validation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// goodPlan is a plan the agent can carry out; each case breaks one thing.
func goodPlan() *api.MachinePlan {
	return &api.MachinePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec: api.MachinePlanSpec{
			Files: []api.PlanFile{
				{Path: "/etc/muster/hello.conf", Content: "hello\n", Mode: 0o644},
				{Path: "/.autorelabel", Mode: 0o600},
				{Path: "/etc/old.conf", Delete: true},
			},
			Instructions: []api.PlanInstruction{
				{Name: "say-hello", Command: "/bin/sh", Args: []string{"-c", "echo hello\necho again"},
					Env: []string{"GREETING=hello", "_X1=a=b", "EMPTY="}, TimeoutSeconds: 30, SaveOutput: true},
				{Name: "restart", Command: "systemctl", Args: []string{"restart", "muster-demo"}},
			},
			Probes: []api.PlanProbe{
				{Name: "http", HTTPGet: &api.HTTPGetProbe{URL: "http://127.0.0.1:8080/healthz"}, PeriodSeconds: 10},
				{Name: "file", Exec: &api.ExecProbe{Command: "/usr/bin/test", Args: []string{"-f", "/etc/muster/hello.conf"}}},
			},
		},
	}
}

func planWith(mutate func(*api.MachinePlan)) *api.MachinePlan {
	p := goodPlan()
	mutate(p)
	return p
}

// wantErrors checks that errs is empty (want == nil) or holds an error on
// each field with the given text in its message.
func checkErrors(t *testing.T, errs field.ErrorList, want map[string]string) {
	t.Helper()
	if len(want) == 0 {
		if len(errs) > 0 {
			t.Fatalf("refused: %v", errs.ToAggregate())
		}
		return
	}
	for path, text := range want {
		found := false
		for _, e := range errs {
			if e.Field == path && strings.Contains(e.Error(), text) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error on %s saying %q; got %v", path, text, errs.ToAggregate())
		}
	}
}

func TestValidatePlanSpec(t *testing.T) {
	many := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		plan   *api.MachinePlan
		errors map[string]string // field -> part of the message
	}{
		{"a plan the agent can carry out", goodPlan(), nil},
		{"setuid bit", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Mode = 0o4755 }),
			map[string]string{"spec.files[0].mode": "between 0 and 0777"}},
		{"setgid and sticky bits", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Mode = 0o3777 }),
			map[string]string{"spec.files[0].mode": "setuid, setgid and sticky bits"}},
		{"negative mode", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Mode = -1 }),
			map[string]string{"spec.files[0].mode": "permission bits"}},
		{"mode 0777 is fine", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Mode = 0o777 }), nil},
		{"root", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "/" }),
			map[string]string{"spec.files[0].path": "not the root directory"}},
		{"a directory at the root", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "/etc" }),
			map[string]string{"spec.files[0].path": "name a file inside it, e.g. /etc/muster.conf"}},
		{"deleting /usr", planWith(func(p *api.MachinePlan) { p.Spec.Files[2].Path = "/usr" }),
			map[string]string{"spec.files[2].path": "directory every Linux system has"}},
		{"NUL in a path", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "/etc/a\x00b" }),
			map[string]string{"spec.files[0].path": "NUL byte"}},
		{"newline in a path", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "/etc/a\nb" }),
			map[string]string{"spec.files[0].path": "control characters"}},
		{"procfs", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "/proc/sys/net/ipv4/ip_forward" }),
			map[string]string{"spec.files[0].path": "sysctl"}},
		{"relative path", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "etc/passwd" }),
			map[string]string{"spec.files[0].path": "absolute, clean path"}},
		{"trailing slash", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "/etc/muster/" }),
			map[string]string{"spec.files[0].path": "absolute, clean path"}},
		{"path too long", planWith(func(p *api.MachinePlan) { p.Spec.Files[0].Path = "/" + strings.Repeat("a/", 2100) + "f" }),
			map[string]string{"spec.files[0].path": "4096"}},
		{"file name too long for the temporary file", planWith(func(p *api.MachinePlan) {
			p.Spec.Files[0].Path = "/etc/" + strings.Repeat("n", maxPathElementBytes+1)
		}), map[string]string{"spec.files[0].path": "255-byte limit"}},
		{"longest file name", planWith(func(p *api.MachinePlan) {
			p.Spec.Files[0].Path = "/etc/" + strings.Repeat("n", maxPathElementBytes)
		}), nil},
		{"a file inside a file", planWith(func(p *api.MachinePlan) { p.Spec.Files[2] = api.PlanFile{Path: "/etc/muster/hello.conf/x"} }),
			map[string]string{"spec.files[2].path": "is inside /etc/muster/hello.conf, which this plan writes as a file"}},
		{"deleting inside a deleted file is fine", planWith(func(p *api.MachinePlan) {
			p.Spec.Files = append(p.Spec.Files, api.PlanFile{Path: "/etc/old.conf/x", Delete: true})
		}), nil},
		{"duplicate path", planWith(func(p *api.MachinePlan) { p.Spec.Files[1].Path = p.Spec.Files[0].Path }),
			map[string]string{"spec.files[1].path": "Duplicate"}},
		{"NUL in a command", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Command = "/bin/sh\x00" }),
			map[string]string{"spec.instructions[0].command": "control characters"}},
		{"relative command path", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Command = "bin/sh" }),
			map[string]string{"spec.instructions[0].command": "looked up on the agent's PATH"}},
		{"NUL in an argument", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Args[1] = "echo\x00hi" }),
			map[string]string{"spec.instructions[0].args[1]": "NUL byte"}},
		{"too many arguments", planWith(func(p *api.MachinePlan) {
			p.Spec.Instructions[0].Args = many(maxArgs+1, func(int) string { return "x" })
		}), map[string]string{"spec.instructions[0].args": "must have at most 256 items"}},
		{"argument too long", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Args[1] = strings.Repeat("x", maxArgBytes+1) }),
			map[string]string{"spec.instructions[0].args[1]": "32768"}},
		{"NUL in env", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Env[0] = "A=b\x00c" }),
			map[string]string{"spec.instructions[0].env[0]": "NUL byte"}},
		{"env without =", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Env[0] = "GREETING" }),
			map[string]string{"spec.instructions[0].env[0]": `"NAME=value"`}},
		{"env name with a space", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Env[0] = "MY VAR=1" }),
			map[string]string{"spec.instructions[0].env[0]": "letters, digits and '_'"}},
		{"env name starting with a digit", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Env[0] = "1A=1" }),
			map[string]string{"spec.instructions[0].env[0]": "does not start with a digit"}},
		{"env name twice", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Env[1] = "GREETING=bye" }),
			map[string]string{"spec.instructions[0].env[1]": "Duplicate"}},
		{"too many env entries", planWith(func(p *api.MachinePlan) {
			p.Spec.Instructions[0].Env = many(maxEnv+1, func(i int) string { return fmt.Sprintf("V%d=1", i) })
		}), map[string]string{"spec.instructions[0].env": "must have at most 64 items"}},
		{"env entry too long", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Env[0] = "A=" + strings.Repeat("x", maxEnvBytes) }),
			map[string]string{"spec.instructions[0].env[0]": "4096"}},
		{"instruction name too long", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Name = strings.Repeat("n", 64) }),
			map[string]string{"spec.instructions[0].name": "63"}},
		{"control character in a name", planWith(func(p *api.MachinePlan) { p.Spec.Instructions[0].Name = "say\x1b[2Jhello" }),
			map[string]string{"spec.instructions[0].name": "control characters"}},
		{"too many instructions", planWith(func(p *api.MachinePlan) {
			p.Spec.Instructions = nil
			for i := 0; i <= maxPlanEntries; i++ {
				p.Spec.Instructions = append(p.Spec.Instructions, api.PlanInstruction{Name: fmt.Sprint(i), Command: "true"})
			}
		}), map[string]string{"spec.instructions": "must have at most 64 items"}},
		{"too many probes", planWith(func(p *api.MachinePlan) {
			p.Spec.Probes = nil
			for i := 0; i <= maxPlanEntries; i++ {
				p.Spec.Probes = append(p.Spec.Probes, api.PlanProbe{Name: fmt.Sprint(i), Exec: &api.ExecProbe{Command: "true"}})
			}
		}), map[string]string{"spec.probes": "must have at most 64 items"}},
		{"NUL in a probe command", planWith(func(p *api.MachinePlan) { p.Spec.Probes[1].Exec.Command = "/usr/bin/test\x00" }),
			map[string]string{"spec.probes[1].exec.command": "control characters"}},
		{"NUL in a probe argument", planWith(func(p *api.MachinePlan) { p.Spec.Probes[1].Exec.Args[0] = "-f\x00" }),
			map[string]string{"spec.probes[1].exec.args[0]": "NUL byte"}},
		{"probe URL too long", planWith(func(p *api.MachinePlan) {
			p.Spec.Probes[0].HTTPGet.URL = "http://h/" + strings.Repeat("x", maxURLBytes)
		}), map[string]string{"spec.probes[0].httpGet.url": "2048"}},
		{"probe period over a day", planWith(func(p *api.MachinePlan) { p.Spec.Probes[0].PeriodSeconds = maxTimeoutSeconds + 1 }),
			map[string]string{"spec.probes[0].periodSeconds": "between 0"}},
		{"strings over 512 KiB together", planWith(func(p *api.MachinePlan) {
			p.Spec.Instructions[0].Args = many(20, func(int) string { return strings.Repeat("x", maxArgBytes) })
			p.Spec.Files[0].Content = strings.Repeat("x", maxPlanFileBytes)
			for i := 0; i < 7; i++ {
				p.Spec.Files = append(p.Spec.Files, api.PlanFile{Path: fmt.Sprintf("/etc/f%d", i), Content: strings.Repeat("x", maxPlanFileBytes)})
			}
		}), map[string]string{"spec": "at most 524288 bytes (512 KiB)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateMachinePlan(tc.plan), tc.errors)
		})
	}
}

const sum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestValidatePlanStatus(t *testing.T) {
	good := func() *api.MachinePlan {
		return &api.MachinePlan{Status: api.MachinePlanStatus{
			Checksum: sum, State: api.PlanStateSucceeded, AppliedChecksum: sum,
			Output: []api.InstructionOutput{{Name: "say-hello", Output: "hello\n"}},
			Probes: []api.ProbeStatus{{Name: "http", Healthy: false, Message: "connection refused"}},
		}}
	}
	with := func(mutate func(*api.MachinePlanStatus)) *api.MachinePlan {
		p := good()
		mutate(&p.Status)
		return p
	}
	for _, tc := range []struct {
		name   string
		plan   *api.MachinePlan
		errors map[string]string
	}{
		{"what an agent reports", good(), nil},
		{"nothing applied yet", with(func(s *api.MachinePlanStatus) { s.AppliedChecksum = "" }), nil},
		{"applied checksum not hex", with(func(s *api.MachinePlanStatus) { s.AppliedChecksum = strings.Repeat("z", 64) }),
			map[string]string{"status.appliedChecksum": "64 lowercase hex digits"}},
		{"applied checksum too short", with(func(s *api.MachinePlanStatus) { s.AppliedChecksum = "abc" }),
			map[string]string{"status.appliedChecksum": "64 lowercase hex digits"}},
		{"applied checksum too long", with(func(s *api.MachinePlanStatus) { s.AppliedChecksum = sum + "00" }),
			map[string]string{"status.appliedChecksum": "64"}},
		{"checksum not hex", with(func(s *api.MachinePlanStatus) { s.Checksum = "forged" }),
			map[string]string{"status.checksum": "64 lowercase hex digits"}},
		{"unknown state", with(func(s *api.MachinePlanStatus) { s.State = "done" }),
			map[string]string{"status.state": "Unsupported value"}},
		{"output too long", with(func(s *api.MachinePlanStatus) { s.Output[0].Output = strings.Repeat("x", maxOutputBytes+1) }),
			map[string]string{"status.output[0].output": "4096"}},
		{"output without a name", with(func(s *api.MachinePlanStatus) { s.Output[0].Name = "" }),
			map[string]string{"status.output[0].name": "Required"}},
		{"output twice", with(func(s *api.MachinePlanStatus) { s.Output = append(s.Output, s.Output[0]) }),
			map[string]string{"status.output[1].name": "Duplicate"}},
		{"too many outputs", with(func(s *api.MachinePlanStatus) {
			for i := 0; i < maxPlanEntries; i++ {
				s.Output = append(s.Output, api.InstructionOutput{Name: fmt.Sprint(i)})
			}
		}), map[string]string{"status.output": "must have at most 64 items"}},
		{"probe message too long", with(func(s *api.MachinePlanStatus) { s.Probes[0].Message = strings.Repeat("x", maxOutputBytes+1) }),
			map[string]string{"status.probes[0].message": "4096"}},
		{"too many probes", with(func(s *api.MachinePlanStatus) {
			for i := 0; i < maxPlanEntries; i++ {
				s.Probes = append(s.Probes, api.ProbeStatus{Name: fmt.Sprint(i)})
			}
		}), map[string]string{"status.probes": "must have at most 64 items"}},
		{"a status over 256 KiB", with(func(s *api.MachinePlanStatus) {
			for i := 0; i < maxPlanEntries; i++ {
				s.Probes = append(s.Probes, api.ProbeStatus{Name: fmt.Sprint(i), Message: strings.Repeat("x", maxOutputBytes)})
			}
		}), map[string]string{"status": "at most 262144 bytes (256 KiB)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateMachinePlanStatusUpdate(tc.plan, goodPlan()), tc.errors)
		})
	}
}

func TestValidateMachineStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC))
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: "AgentReported", Message: "ok", LastTransitionTime: now}
	}
	good := func() *api.Machine {
		return &api.Machine{Status: api.MachineStatus{
			Phase: api.MachinePhaseRunning, PlanState: api.PlanStateSucceeded, AgentVersion: "v0.3.1",
			Addresses: []api.MachineAddress{{Type: api.MachineHostName, Address: "node-a"},
				{Type: api.MachineInternalIP, Address: "10.0.0.7"}, {Type: api.MachineExternalIP, Address: "fd00::7"}},
			Conditions: []metav1.Condition{cond("Ready", metav1.ConditionTrue), cond("example.com/DiskFull", metav1.ConditionFalse)},
		}}
	}
	with := func(mutate func(*api.MachineStatus)) *api.Machine {
		m := good()
		mutate(&m.Status)
		return m
	}
	for _, tc := range []struct {
		name    string
		machine *api.Machine
		errors  map[string]string
	}{
		{"what an agent reports", good(), nil},
		{"condition status Bogus", with(func(s *api.MachineStatus) { s.Conditions[0].Status = "Bogus" }),
			map[string]string{"status.conditions[0].status": `supported values: "False", "True", "Unknown"`}},
		{"condition type not a name", with(func(s *api.MachineStatus) { s.Conditions[0].Type = "not a type!" }),
			map[string]string{"status.conditions[0].type": "Invalid value"}},
		{"condition type twice", with(func(s *api.MachineStatus) { s.Conditions[1].Type = "Ready" }),
			map[string]string{"status.conditions[1]": "Duplicate"}},
		{"condition without a time", with(func(s *api.MachineStatus) { s.Conditions[0].LastTransitionTime = metav1.Time{} }),
			map[string]string{"status.conditions[0].lastTransitionTime": "Required"}},
		{"condition reason not CamelCase", with(func(s *api.MachineStatus) { s.Conditions[0].Reason = "run curl evil.sh | sh" }),
			map[string]string{"status.conditions[0].reason": "Invalid value"}},
		{"condition message too long", with(func(s *api.MachineStatus) {
			s.Conditions[0].Message = strings.Repeat("x", maxConditionMessageBytes+1)
		}), map[string]string{"status.conditions[0].message": "4096"}},
		{"too many conditions", with(func(s *api.MachineStatus) {
			s.Conditions = nil
			for i := 0; i <= maxConditions; i++ {
				s.Conditions = append(s.Conditions, cond(fmt.Sprintf("C%d", i), metav1.ConditionTrue))
			}
		}), map[string]string{"status.conditions": "must have at most 16 items"}},
		{"1.4 MB of conditions", with(func(s *api.MachineStatus) { s.Conditions[0].Message = strings.Repeat("x", 1400<<10) }),
			map[string]string{"status": "at most 262144 bytes (256 KiB)"}},
		{"agent version too long", with(func(s *api.MachineStatus) { s.AgentVersion = strings.Repeat("v", maxVersionLen+1) }),
			map[string]string{"status.agentVersion": "128"}},
		{"agent version with an escape sequence", with(func(s *api.MachineStatus) { s.AgentVersion = "v1\x1b[31m" }),
			map[string]string{"status.agentVersion": "control characters"}},
		{"IP address that is not one", with(func(s *api.MachineStatus) { s.Addresses[1].Address = "10.0.0.300" }),
			map[string]string{"status.addresses[1].address": "must be an IP address"}},
		{"host name with a newline", with(func(s *api.MachineStatus) { s.Addresses[0].Address = "node-a\nPHISH" }),
			map[string]string{"status.addresses[0].address": "control characters"}},
		{"empty address", with(func(s *api.MachineStatus) { s.Addresses[0].Address = "" }),
			map[string]string{"status.addresses[0].address": "Required"}},
		{"too many addresses", with(func(s *api.MachineStatus) {
			for i := 0; i < maxAddresses; i++ {
				s.Addresses = append(s.Addresses, api.MachineAddress{Type: api.MachineInternalIP, Address: fmt.Sprintf("10.0.1.%d", i)})
			}
		}), map[string]string{"status.addresses": "must have at most 32 items"}},
		{"message too long", with(func(s *api.MachineStatus) { s.Message = strings.Repeat("x", maxMessageBytes+1) }),
			map[string]string{"status.message": "4096"}},
		{"reason too long", with(func(s *api.MachineStatus) { s.Reason = strings.Repeat("x", maxReasonBytes+1) }),
			map[string]string{"status.reason": "1024"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateMachineStatusUpdate(tc.machine, good()), tc.errors)
		})
	}
}

func TestValidateClusterStatus(t *testing.T) {
	c := &api.Cluster{Status: api.ClusterStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: "Bogus",
		Reason: "Why", LastTransitionTime: metav1.Now()}}}}
	checkErrors(t, ValidateClusterStatusUpdate(c, &api.Cluster{}), map[string]string{"status.conditions[0].status": "supported values"})
	c.Status.Conditions[0].Status = metav1.ConditionTrue
	checkErrors(t, ValidateClusterStatusUpdate(c, &api.Cluster{}), nil)
}

// TestStatusLimitsRatchet: a status stored before the limits (an agent's
// 1.4 MB of conditions with status Bogus) must not stop the server from
// moving its Machine on, but no write may change its unbounded parts
// except to bring them within the limits.
func TestStatusLimitsRatchet(t *testing.T) {
	junk := []metav1.Condition{{Type: "Ready", Status: "Bogus", Reason: "Flood",
		Message: strings.Repeat("x", 1400<<10), LastTransitionTime: metav1.Now()}}
	stored := &api.Machine{Status: api.MachineStatus{Phase: api.MachinePhaseRunning, Conditions: junk,
		Addresses: []api.MachineAddress{{Type: api.MachineInternalIP, Address: "PHISH: run curl evil.sh | sh"}}}}

	draining := stored.DeepCopy()
	draining.Status.Phase, draining.Status.Reason = api.MachinePhaseDraining, "Deleted"
	checkErrors(t, ValidateMachineStatusUpdate(draining, stored), nil)

	grown := stored.DeepCopy()
	grown.Status.Conditions = append(grown.Status.Conditions, metav1.Condition{Type: "More", Status: "True",
		Reason: "Flood", LastTransitionTime: metav1.Now()})
	checkErrors(t, ValidateMachineStatusUpdate(grown, stored), map[string]string{"status": "at most 262144 bytes"})

	longReason := stored.DeepCopy()
	longReason.Status.Reason = strings.Repeat("x", 300<<10)
	checkErrors(t, ValidateMachineStatusUpdate(longReason, stored), map[string]string{"status": "at most 262144 bytes"})

	small := stored.DeepCopy()
	small.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "Bogus", Reason: "Still", LastTransitionTime: metav1.Now()}}
	checkErrors(t, ValidateMachineStatusUpdate(small, stored), map[string]string{"status.conditions[0].status": "supported values"})

	cleared := stored.DeepCopy()
	cleared.Status.Conditions = nil
	checkErrors(t, ValidateMachineStatusUpdate(cleared, stored), nil)

	readdressed := cleared.DeepCopy()
	readdressed.Status.Addresses[0].Address = "PHISH again"
	checkErrors(t, ValidateMachineStatusUpdate(readdressed, cleared), map[string]string{"status.addresses[0].address": "must be an IP address"})
}

// A plan status stored before the checks (forged checksum, hundreds of
// outputs) still takes the agent's next report when it carries those over
// unchanged, and refuses any report that changes them into something invalid.
func TestPlanStatusLimitsRatchet(t *testing.T) {
	stored := &api.MachinePlan{Status: api.MachinePlanStatus{Checksum: sum, AppliedChecksum: "forged", State: api.PlanStateSucceeded}}
	for i := 0; i < 100; i++ {
		stored.Status.Output = append(stored.Status.Output, api.InstructionOutput{Name: fmt.Sprint(i), Output: strings.Repeat("x", 4096)})
	}
	report := stored.DeepCopy()
	report.Status.State = api.PlanStateInProgress
	checkErrors(t, ValidateMachinePlanStatusUpdate(report, stored), nil)
	more := report.DeepCopy()
	more.Status.Output = append(more.Status.Output, api.InstructionOutput{Name: "new"})
	checkErrors(t, ValidateMachinePlanStatusUpdate(more, stored), map[string]string{"status": "at most 262144 bytes"})
	fewer := report.DeepCopy()
	fewer.Status.Output = fewer.Status.Output[:65]
	for i := range fewer.Status.Output {
		fewer.Status.Output[i].Output = "short"
	}
	checkErrors(t, ValidateMachinePlanStatusUpdate(fewer, stored), map[string]string{"status.output": "must have at most 64 items"})
	report.Status.Output = nil
	checkErrors(t, ValidateMachinePlanStatusUpdate(report, stored), nil)
	report.Status.AppliedChecksum = "forged-again"
	checkErrors(t, ValidateMachinePlanStatusUpdate(report, stored), map[string]string{"status.appliedChecksum": "64 lowercase hex"})
}

// BenchmarkValidateMachineStatus is the cost the status checks add to an
// agent's status write (one per heartbeat-driven change, not per heartbeat).
func BenchmarkValidateMachineStatus(b *testing.B) {
	old := &api.Machine{Status: api.MachineStatus{Phase: api.MachinePhaseRunning, PlanState: api.PlanStateSucceeded,
		AgentVersion: "v0.3.1", Addresses: []api.MachineAddress{{Type: api.MachineHostName, Address: "node-a"},
			{Type: api.MachineInternalIP, Address: "10.0.0.7"}}}}
	m := old.DeepCopy()
	m.Status.Addresses[1].Address = "10.0.0.8"
	for i := 0; i < b.N; i++ {
		if errs := ValidateMachineStatusUpdate(m, old); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}

package validation

import (
	"bytes"
	"encoding/json"
	"os"
	"path"
	"reflect"
	"strings"
	"syscall"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// FuzzValidatePlanSpec: plan validation never panics, and a plan it
// accepts is one the agent can carry out as written: every path, program,
// argument and environment entry can be handed to the kernel (no NUL),
// paths are absolute and name a file, the mode is what the agent will set,
// env entries are NAME=value, and the plan round-trips through JSON
// unchanged (same checksum, still accepted).
func FuzzValidatePlanSpec(f *testing.F) {
	type seed struct {
		path, content string
		mode          int32
		command, arg  string
		env, name     string
		url, probeCmd string
	}
	for _, s := range []seed{
		{"/etc/muster/hello.conf", "hello\n", 0o644, "/bin/sh", "-c", "GREETING=hello", "say-hello", "http://127.0.0.1:8080/healthz", "/usr/bin/test"},
		{"/etc/systemd/system/app.service", "[Unit]\n", 0o600, "systemctl", "daemon-reload", "PATH=/usr/bin", "reload", "https://localhost/ready", "true"},
		{"/usr/local/bin/tool", "#!/bin/sh\n", 0o4755, "chmod", "u+s", "A=b=c", "setuid", "http://h", "/bin/true"},
		{"/", "", 0, "/bin/sh\x00", "a\x00b", "A=\x00", "n", "ftp://x", "rel/cmd"},
		{"/etc", "", 0o777, "./run", "", "1A=1", "name\nnl", "http://[::1]:80/", "sh"},
		{"/proc/sys/net/ipv4/ip_forward", "1", 0o644, "sysctl", "-w", "=x", "", "http://%zz", ""},
		{"/etc/a/../b", "x", -1, "", "", "NOEQUALS", "x", "", "/bin/x"},
		{"etc/relative", "", 0o7777, "sh", "", "", "dup", "https://a/", "sh"},
	} {
		f.Add(s.path, s.content, s.mode, s.command, s.arg, s.env, s.name, s.url, s.probeCmd)
	}
	f.Fuzz(func(t *testing.T, filePath, content string, mode int32, command, arg, env, name, url, probeCmd string) {
		p := &api.MachinePlan{}
		p.Name = "node-a"
		p.Spec.Files = []api.PlanFile{{Path: filePath, Content: content, Mode: mode}, {Path: filePath + ".d/x", Delete: true}}
		in := api.PlanInstruction{Name: name, Command: command, TimeoutSeconds: 30}
		if arg != "" {
			in.Args = []string{arg, arg}
		}
		if env != "" {
			in.Env = []string{env}
		}
		p.Spec.Instructions = []api.PlanInstruction{in}
		p.Spec.Probes = []api.PlanProbe{{Name: "http", HTTPGet: &api.HTTPGetProbe{URL: url}}}
		if probeCmd != "" {
			p.Spec.Probes = append(p.Spec.Probes, api.PlanProbe{Name: name + "-probe", Exec: &api.ExecProbe{Command: probeCmd, Args: []string{arg}}})
		}

		errs := ValidateMachinePlan(p)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back api.MachinePlan
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("a plan does not read back from its JSON: %v", err)
		}
		if len(errs) > 0 {
			return
		}
		if again := ValidateMachinePlan(&back); len(again) > 0 {
			t.Fatalf("an accepted plan is refused once read back from JSON: %v", again)
		}
		// A plan's checksum (internal/registry's PlanChecksum) is the
		// SHA-256 of its spec's JSON: the same JSON, the same checksum.
		was, err := json.Marshal(&p.Spec)
		if err != nil {
			t.Fatal(err)
		}
		now, err := json.Marshal(&back.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Spec, p.Spec) || !bytes.Equal(now, was) {
			t.Fatalf("an accepted plan changed through JSON (its checksum would too)")
		}
		kernel := func(what, s string) {
			if _, err := syscall.ByteSliceFromString(s); err != nil || strings.ContainsAny(s, "\x00") {
				t.Fatalf("accepted %s %q, which the kernel cannot take: %v", what, s, err)
			}
		}
		for _, f := range p.Spec.Files {
			kernel("path", f.Path)
			if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" || hasControl(f.Path) {
				t.Fatalf("accepted path %q", f.Path)
			}
			if f.Mode < 0 || os.FileMode(f.Mode) != os.FileMode(f.Mode).Perm() {
				t.Fatalf("accepted mode %#o, which the agent would write as %#o", f.Mode, os.FileMode(f.Mode).Perm())
			}
		}
		for _, in := range p.Spec.Instructions {
			kernel("command", in.Command)
			if in.Command == "" || hasControl(in.Command) || (strings.Contains(in.Command, "/") && !path.IsAbs(in.Command)) {
				t.Fatalf("accepted command %q", in.Command)
			}
			for _, a := range in.Args {
				kernel("argument", a)
			}
			for _, e := range in.Env {
				kernel("environment entry", e)
				if k, _, ok := strings.Cut(e, "="); !ok || !envName.MatchString(k) {
					t.Fatalf("accepted environment entry %q", e)
				}
			}
			if in.Name == "" || len(in.Name) > maxEntryNameLen || hasControl(in.Name) {
				t.Fatalf("accepted instruction name %q", in.Name)
			}
		}
		for _, pr := range p.Spec.Probes {
			if pr.Exec != nil {
				kernel("probe command", pr.Exec.Command)
				for _, a := range pr.Exec.Args {
					kernel("probe argument", a)
				}
			}
		}
	})
}

package e2e

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// qemuArch is an architecture whose real agent binary the arch tests run,
// under qemu-user (Debian's qemu-user-static) unless it is this host's.
type qemuArch struct {
	goarch, goarm string
	machine       string // what uname -m says on such a host
	platform      string // what the agent reports in status.platform
	binfmt        string // /usr/lib/binfmt.d/<binfmt>.conf registers qemu for it; "" runs natively
	elfMachine    elf.Machine
}

// archFleet is the fleet TestArchAgents installs: this host's own amd64
// (native, no qemu) beside the two emulated ones.
var archFleet = []qemuArch{
	{goarch: "amd64", machine: "x86_64", platform: "linux/amd64", elfMachine: elf.EM_X86_64},
	{goarch: "arm64", machine: "aarch64", platform: "linux/arm64", binfmt: "qemu-aarch64", elfMachine: elf.EM_AARCH64},
	{goarch: "arm", goarm: "7", machine: "armv7l", platform: "linux/arm/v7", binfmt: "qemu-arm", elfMachine: elf.EM_ARM},
}

// buildCrossAgent builds muster-agent of version v for linux/arch as
// `make release` does (no cgo, -trimpath, stripped, so that the two share
// the build cache), named as --agent-binaries-dir wants it.
func buildCrossAgent(t *testing.T, dir string, a qemuArch, v string) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("muster-agent-%s-linux-%s", v, a.goarch))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/muster-io/muster/internal/version.Version="+v+" -s -w", "-o", out, "github.com/muster-io/muster/cmd/agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+a.goarch, "GOARM="+a.goarm)
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building muster-agent %s for linux/%s: %v\n%s", v, a.goarch, err, b)
	}
	t.Logf("built muster-agent %s for linux/%s in %v", v, a.goarch, time.Since(start).Round(time.Second))
	return out
}

// binfmtRegistration is the binfmt_misc line Debian's qemu-user-static
// ships for a: it makes the kernel run a's ELF binaries with qemu.
func binfmtRegistration(t *testing.T, a qemuArch) string {
	t.Helper()
	b, err := os.ReadFile("/usr/lib/binfmt.d/" + a.binfmt + ".conf")
	if err != nil {
		t.Fatalf("the arch tests run arm agents under qemu-user: apt-get install qemu-user-static (.ci/run does): %v", err)
	}
	return strings.TrimSpace(string(b))
}

// runUnderQemu runs argv (a binary of a, with its arguments) the way a
// host with qemu-user-static's binfmt handlers runs it: the kernel hands
// a's ELF files to qemu, including the binaries the agent itself execs
// (its upgrade's `<new> version` self-check and the exec into the new
// agent), so nothing in the agent knows it is emulated. The handler is
// registered in a binfmt_misc instance of the process's own user namespace
// (Linux 6.7+), not the host's: test-only machinery that changes nothing
// for other processes on the machine. The agent is pid of the returned
// process (unshare and sh exec it).
func runUnderQemu(t *testing.T, a qemuArch, env []string, argv ...string) *agentProc {
	t.Helper()
	const script = `mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || exit 97
printf '%s' "$1" >/proc/sys/fs/binfmt_misc/register || exit 98
shift
exec "$@"`
	p := &agentProc{t: t, log: &syncBuffer{}, exited: make(chan struct{})}
	if a.binfmt == "" {
		p.cmd = exec.Command(argv[0], argv[1:]...)
	} else {
		p.cmd = exec.Command("unshare", append([]string{"--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", binfmtRegistration(t, a)}, argv...)...)
	}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %v under qemu: %v", argv, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s agent %v, the end of its output:\n%s", a.platform, argv, lastLines(p.log.String(), 40))
		}
	})
	return p
}

// installAs runs the server's install.sh as a host whose `uname -m` is
// machine says. The uname earlier on PATH is test-only: this host is
// x86_64, and install.sh itself always asks the real uname.
func installAs(t *testing.T, s *server, r installRoot, machine string, args ...string) (string, error) {
	t.Helper()
	realUname, err := exec.LookPath("uname")
	if err != nil {
		t.Fatal(err)
	}
	shim := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nif [ \"${1:-}\" = -m ]; then echo %s; else exec %s \"$@\"; fi\n", machine, realUname)
	if err := os.WriteFile(filepath.Join(shim, "uname"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, s.caPEM(t), 0o644); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "install.sh")
	if out, err := exec.Command("curl", "-fsSL", "--cacert", ca, "-o", script, s.url()+"/install.sh").CombinedOutput(); err != nil {
		t.Fatalf("downloading install.sh: %v\n%s", err, out)
	}
	cmd := exec.Command("sh", append([]string{script, "agent"}, args...)...)
	cmd.Env = r.env("PATH=" + shim + string(os.PathListSeparator) + os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func elfMachine(t *testing.T, path string) elf.Machine {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s is no ELF binary: %v", path, err)
	}
	defer f.Close()
	return f.Machine
}

// TestArchAgentsUnderQemu: the acceptance for arm64 and armv7, beside
// this host's amd64. Real agent binaries built for each run, the arm ones
// under qemu-user; each is installed by
// the server's install.sh (which picks the binary by uname -m, and says
// which architectures the server has when the host's is missing), joins,
// reports its platform, runs a plan, refuses an agentUpgrade that gives no
// sum for its platform without touching its binary, and is upgraded by one
// agentUpgrade plan, the same for all three, to its own architecture's
// newer build.
func TestArchAgentsUnderQemu(t *testing.T) {
	t.Parallel()
	assets, versions := t.TempDir(), t.TempDir()
	built := map[string]map[string]string{} // goarch → version → binary
	for _, a := range archFleet {
		built[a.goarch] = map[string]string{}
		for _, v := range []string{"vA", "vB"} {
			built[a.goarch][v] = buildCrossAgent(t, versions, a, v)
		}
	}
	// The assets install.sh serves: the server's own platform's (amd64)
	// and arm64's vA, at first.
	copyExecutable(t, built["arm64"]["vA"], filepath.Join(assets, "muster-agent-linux-arm64"))
	s := startServer(t, "", "--agent-binary", built["amd64"]["vA"], "--agent-assets-dir", assets, "--agent-binaries-dir", versions)
	token := newToken(t, s)

	// A host whose architecture the server has no agent for: install.sh
	// names the ones it has, and installs nothing.
	r := newInstallRoot(t)
	out, err := installAs(t, s, r, "armv7l", "--token", token, "--server", s.url())
	if err == nil || !strings.Contains(out, "has no muster-agent-linux-arm for this armv7l host; it has agents for: linux/amd64 linux/arm64") {
		t.Fatalf("install.sh on armv7l with no arm agent on the server: want an error naming the architectures it has: %v\n%s", err, out)
	}
	if left := r.files(t); len(left) != 0 {
		t.Errorf("a refused install left files: %v", left)
	}
	// The operator adds it; the server serves it without a restart.
	copyExecutable(t, built["arm"]["vA"], filepath.Join(assets, "muster-agent-linux-arm"))

	type machine struct {
		arch   qemuArch
		name   string
		binary string // the installed agent
		agent  *agentProc
	}
	var machines []*machine
	for _, a := range archFleet {
		m := &machine{arch: a, name: "arch-" + a.goarch}
		r := newInstallRoot(t)
		out, err := installAs(t, s, r, a.machine, "--token", token, "--server", s.url(), "--node-name", m.name, "--label", "fleet=arch")
		if err != nil {
			t.Fatalf("install.sh agent on %s: %v\n%s", a.machine, err, out)
		}
		if want := "this host is linux/" + a.machine + ": it runs muster-agent-linux-" + a.goarch; !strings.Contains(out, want) {
			t.Errorf("install.sh on %s does not say %q:\n%s", a.machine, want, out)
		}
		m.binary = filepath.Join(r.binDir, "muster-agent")
		if got, want := fileSHA256(t, m.binary), fileSHA256(t, built[a.goarch]["vA"]); got != want {
			t.Errorf("install.sh on %s installed SHA-256 %s, not the linux/%s agent's %s", a.machine, got, a.goarch, want)
		}
		if got := elfMachine(t, m.binary); got != a.elfMachine {
			t.Errorf("install.sh on %s installed a binary for %v", a.machine, got)
		}
		// What systemd would run: the unit's ExecStart with its env file.
		argv, envFile := unitExecStart(t, filepath.Join(r.systemdDir, "muster-agent.service"))
		envText, err := os.ReadFile(envFile)
		if err != nil {
			t.Fatal(err)
		}
		m.agent = runUnderQemu(t, a, strings.Split(strings.TrimSpace(string(envText)), "\n"), argv...)
		machines = append(machines, m)
	}
	status := func(name string) string {
		out, _ := s.kubectl("get", "machine", name, "-o", "jsonpath={.status.phase} {.status.platform} {.status.agentVersion}")
		return out
	}
	for _, m := range machines {
		want := "Running " + m.arch.platform + " vA"
		waitFor(t, 180*time.Second, m.name+" to be "+want, func() bool { return status(m.name) == want })
	}
	// A plan: a file written and a command run on each.
	planDir := t.TempDir()
	for _, m := range machines {
		kubectlDoc(t, s, "apply", fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePlan
metadata:
  name: %[1]s
spec:
  files:
  - path: %[2]s/%[1]s.txt
    content: "written by the %[3]s agent\n"
    mode: 420
  instructions:
  - name: show
    command: /bin/cat
    args: ["%[2]s/%[1]s.txt"]
    saveOutput: true
`, m.name, planDir, m.arch.platform))
	}
	planState := func(name string) (state, output string) {
		out, _ := s.kubectl("get", "machineplan", name, "-o", `jsonpath={.status.state}|{.status.output[*].output}`)
		state, output, _ = strings.Cut(out, "|")
		return state, output
	}
	for _, m := range machines {
		waitFor(t, 120*time.Second, m.name+"'s plan to succeed", func() bool { st, _ := planState(m.name); return st == "succeeded" })
		if _, output := planState(m.name); !strings.Contains(output, "written by the "+m.arch.platform+" agent") {
			t.Errorf("%s's plan output %q does not show the file it wrote", m.name, output)
		}
	}

	// Figures, read once each agent has joined and run its plan: the
	// resident set is qemu's process, emulator and translated code included.
	for _, m := range machines {
		fi, err := os.Stat(m.binary)
		if err != nil {
			t.Fatal(err)
		}
		how := "native"
		if m.arch.binfmt != "" {
			how = "under qemu-user, the RSS is qemu's"
		}
		t.Logf("figure: %s agent (%s): idle RSS %d KiB; binary %d bytes", m.arch.platform, how, rssKiB(m.agent.cmd.Process.Pid), fi.Size())
	}

	sum := func(goarch, v string) string {
		t.Helper()
		code, body, err := s.get(fmt.Sprintf("/assets/agent/%s/muster-agent-linux-%s.sha256", v, goarch))
		if err != nil || code != 200 {
			t.Fatalf("sha256 of %s for %s: %d %v %s", v, goarch, code, err, body)
		}
		return strings.Fields(string(body))[0]
	}
	upgradePlan := func(name string, platforms map[string]string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: muster.io/v1alpha1\nkind: MachinePlan\nmetadata:\n  name: %s\nspec:\n  maxFailures: 1\n  agentUpgrade:\n    version: vB\n    timeoutSeconds: 300\n    platforms:\n", name)
		for p, sum := range platforms {
			fmt.Fprintf(&b, "    - {platform: %s, sha256: %s}\n", p, sum)
		}
		return b.String()
	}

	// An upgrade that gives no sum for the armv7 machine's platform: the
	// plan fails with what to add, and nothing is downloaded or replaced.
	armv7 := machines[2]
	kubectlDoc(t, s, "replace", upgradePlan(armv7.name, map[string]string{"linux/arm64": sum("arm64", "vB")}))
	waitFor(t, 120*time.Second, armv7.name+"'s upgrade without its platform to fail", func() bool { st, _ := planState(armv7.name); return st == "failed" })
	if _, output := planState(armv7.name); !strings.Contains(output, "gives no SHA-256 for this machine's platform linux/arm/v7 (it gives linux/arm64): add {platform: linux/arm") ||
		!strings.Contains(output, "nothing was downloaded or replaced") {
		t.Errorf("the failed upgrade says %q, want it to name the missing platform", output)
	}
	if got, want := fileSHA256(t, armv7.binary), fileSHA256(t, built["arm"]["vA"]); got != want {
		t.Errorf("a refused upgrade changed the installed agent (%s, want %s)", got, want)
	}
	if entries, _ := os.ReadDir(filepath.Dir(armv7.binary)); len(entries) != 2 { // muster-agent and its uninstall script
		t.Errorf("a refused upgrade left files beside the agent: %v", entries)
	}

	// One plan for all: each agent installs its own architecture's vB.
	every := map[string]string{"linux/amd64": sum("amd64", "vB"), "linux/arm64": sum("arm64", "vB"), "linux/arm": sum("arm", "vB")}
	start := time.Now()
	var wg sync.WaitGroup
	for _, m := range machines {
		kubectlDoc(t, s, "replace", upgradePlan(m.name, every))
	}
	for _, m := range machines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waitFor(t, 300*time.Second, m.name+" to be upgraded to vB", func() bool {
				st, _ := planState(m.name)
				return st == "succeeded" && strings.HasSuffix(status(m.name), " "+m.arch.platform+" vB")
			})
		}()
	}
	wg.Wait()
	t.Logf("the three agents upgraded in %v", time.Since(start).Round(time.Second))
	for _, m := range machines {
		if got, want := fileSHA256(t, m.binary), fileSHA256(t, built[m.arch.goarch]["vB"]); got != want {
			t.Errorf("%s runs %s after the upgrade, not its own architecture's vB %s", m.name, got, want)
		}
		if got := elfMachine(t, m.binary+".previous"); got != m.arch.elfMachine {
			t.Errorf("%s kept a previous agent for %v", m.name, got)
		}
		if _, output := planState(m.name); !strings.Contains(output, "muster-agent upgraded from vA to vB") {
			t.Errorf("%s's plan output %q does not record the upgrade", m.name, output)
		}
	}
}

// kubectlDoc runs kubectl VERB -f on a manifest; replace, not apply, for
// a plan whose fields change: a client-side apply would merge in the
// fields left out.
func kubectlDoc(t *testing.T, s *server, verb, doc string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "doc.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := s.kubectl(verb, "-f", f); err != nil {
		t.Fatalf("kubectl %s: %v\n%s\n%s", verb, err, out, doc)
	}
}

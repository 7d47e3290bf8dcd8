package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tourStep is one command of the README's tour and the output the README
// shows under it, each line a pattern where … stands for anything.
type tourStep struct {
	command string
	expect  []string
}

// readmeTour returns the commands of the sh blocks between the README's
// tour marks, continuation lines joined, and the output shown under each.
func readmeTour(t *testing.T, readme string) []tourStep {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	begin, end := strings.Index(text, "<!-- tour:"), strings.Index(text, "<!-- tour: end -->")
	if begin < 0 || end < begin {
		t.Fatalf("%s has no tour marks (<!-- tour: … --> … <!-- tour: end -->)", readme)
	}
	var steps []tourStep
	inBlock, afterCommand := false, false
	var pending string
	for _, line := range strings.Split(text[begin:end], "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock, afterCommand = true, false
			continue
		case strings.HasPrefix(line, "```"):
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		if pending != "" {
			line = pending + line
			pending = ""
		}
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasSuffix(trimmed, `\`):
			pending = strings.TrimSuffix(trimmed, `\`) + " "
		case trimmed == "":
			afterCommand = false
		case strings.HasPrefix(trimmed, "#"):
			// Comments right under a command are its output; others explain.
			if afterCommand {
				steps[len(steps)-1].expect = append(steps[len(steps)-1].expect, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			}
		default:
			steps = append(steps, tourStep{command: line})
			afterCommand = true
		}
	}
	return steps
}

// pattern turns a line of shown output into a regexp: … is anything on the line.
func pattern(shown string) *regexp.Regexp {
	parts := strings.Split(shown, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(strings.TrimSpace(p))
	}
	return regexp.MustCompile(strings.Join(parts, ".*?"))
}

// TestReadmeTour runs the README's tour as a user would: `make run`, then
// every command of the tour's sh blocks in one shell, in a fresh directory
// laid out like the repository (bin/, testdata/), with no KUBECONFIG of its
// own, and checks that each command succeeds and prints what the README
// shows. `make run` must serve on loopback only.
func TestReadmeTour(t *testing.T) {
	// Not parallel: runs make in the checkout, as a newcomer does.
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	steps := readmeTour(t, filepath.Join(repo, "README.md"))
	if len(steps) < 10 || steps[0].command != "make run" {
		t.Fatalf("the README's tour should start with `make run`; found %d commands, the first %+v", len(steps), steps[0])
	}
	t.Run("as "+map[bool]string{true: "root", false: "this user"}[os.Geteuid() == 0], func(t *testing.T) { runReadmeTour(t, repo, steps, nil) })
	if os.Geteuid() == 0 {
		// The defaults differ for root (/var/lib/muster/...): the tour must
		// work for both.
		t.Run("as nobody", func(t *testing.T) { runReadmeTour(t, repo, steps, &syscall.Credential{Uid: 65534, Gid: 65534}) })
	}
}

func runReadmeTour(t *testing.T, repo string, steps []tourStep, cred *syscall.Credential) {
	work := t.TempDir()
	if cred != nil {
		// t.TempDir's parent is root's alone; the user must pass through it.
		if err := os.Chmod(filepath.Dir(work), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(work, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(work, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"muster-server": serverBin, "muster-agent": agentBin} {
		abs, _ := filepath.Abs(target)
		if err := os.Symlink(abs, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(repo, "testdata"), filepath.Join(work, "testdata")); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		for _, p := range []string{bin, filepath.Join(work, "testdata")} {
			if err := os.Lchown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = os.RemoveAll("/tmp/muster-tour") // the plan the tour writes
	t.Cleanup(func() { _ = os.RemoveAll("/tmp/muster-tour") })

	// make run, exactly as the Makefile has it, on a free port instead of
	// 9443 so that the test does not collide with a server someone runs.
	port := freePort(t)
	s := &server{t: t, host: "127.0.0.1", dataDir: filepath.Join(work, "muster-data"), port: port, log: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command("make", "-C", repo, "-o", "build", "run", "BIN="+bin, "DATA_DIR="+s.dataDir, fmt.Sprintf("HTTPS_PORT=%d", port))
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { stopGroup(t, s.cmd, s.exited) })
	if err := s.waitReady(90 * time.Second); err != nil {
		t.Fatalf("make run: %v\n%s", err, s.log.String())
	}

	// Loopback only: bound to 127.0.0.1, and the admin kubeconfig says so.
	if ip := nonLoopbackIPv4(); ip != "" {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, fmt.Sprint(port)), 2*time.Second); err == nil {
			c.Close()
			t.Errorf("make run answers on %s: it should serve on loopback only", ip)
		}
	}
	kc, _ := os.ReadFile(filepath.Join(s.dataDir, "admin.kubeconfig"))
	if want := fmt.Sprintf("server: https://127.0.0.1:%d", port); !strings.Contains(string(kc), want) {
		t.Errorf("the admin kubeconfig does not point at 127.0.0.1:\n%s", kc)
	}

	var script strings.Builder
	script.WriteString("set -eo pipefail\n")
	for _, st := range steps[1:] {
		script.WriteString(strings.ReplaceAll(st.command, "127.0.0.1:9443", fmt.Sprintf("127.0.0.1:%d", port)) + "\n")
	}
	outPath := filepath.Join(work, "tour.out")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script.String())
	sh.Dir = work
	// Output to a file, not a pipe: the tour leaves processes in the
	// background, which would hold a pipe open after the shell ends.
	sh.Stdout, sh.Stderr = out, out
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	sh.Env = append(withoutEnv(os.Environ(), "KUBECONFIG", "HOME"), "HOME="+work)
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	runErr := make(chan error, 1)
	go func() { runErr <- sh.Wait(); close(done) }()
	t.Cleanup(func() { stopGroup(t, sh, done) })
	err = <-runErr
	got, _ := os.ReadFile(outPath)
	if err != nil {
		t.Fatalf("the README tour failed (%v); its script:\n%s\n--- output ---\n%s", err, script.String(), got)
	}
	for _, st := range steps {
		for _, shown := range st.expect {
			if !pattern(shown).Match(got) {
				t.Errorf("`%s` should print %q; the tour printed:\n%s", st.command, shown, got)
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(work, "admin.kubeconfig")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig --output: %v, mode %v; want a 0600 file", err, fi)
	}
}

// stopGroup ends a process started with its own process group, with
// everything it left running.
func stopGroup(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM", cmd.Path)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

func nonLoopbackIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// TestReadmeFlagsExist: every muster-server and muster-agent command the
// README shows, in the tour or not (HA, load tests, `make run` variants),
// uses only flags the binaries have, so a renamed flag cannot leave the
// README behind.
func TestReadmeFlagsExist(t *testing.T) {
	// Not parallel: runs make in the checkout, as a newcomer does.
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{"bin/muster-server": serverBin, "bin/muster-agent": agentBin}
	flagRE := regexp.MustCompile(`(?:^|\s)(--[a-z][a-z0-9-]*)`)
	helpFlags := map[string]string{} // command words -> --help output
	checked := 0
	inBlock := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = strings.HasPrefix(line, "```sh")
			continue
		}
		line = strings.TrimSpace(line)
		if !inBlock || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(line, "make run ") {
			makefile, _ := os.ReadFile(filepath.Join(repo, "Makefile"))
			for _, w := range strings.Fields(line)[2:] {
				if name, _, ok := strings.Cut(w, "="); ok && !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`\s*\?=`).Match(makefile) {
					t.Errorf("the README runs `%s` with %s, which the Makefile does not read", line, name)
				}
			}
			// What make would run, on the binary the test has.
			args := append([]string{"-s", "-n", "-o", "build", "-C", repo}, strings.Fields(line)[1:]...)
			out, err := exec.Command("make", append(args, "BIN=bin")...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v\n%s", line, err, out)
				continue
			}
			line = strings.TrimSpace(string(out))
		}
		for _, m := range regexp.MustCompile(`bin/muster-(server|agent)((?:\s+[a-z]+)*)([^|;&)]*)`).FindAllStringSubmatch(line, -1) {
			words := strings.Fields(m[2])
			key := "bin/muster-" + m[1] + " " + strings.Join(words, " ")
			if _, ok := helpFlags[key]; !ok {
				out, err := runIn(t.TempDir(), nil, bins["bin/muster-"+m[1]], append(words, "--help")...)
				if err != nil {
					t.Errorf("%s --help: %v\n%s", key, err, out)
				}
				helpFlags[key] = out
			}
			for _, f := range flagRE.FindAllStringSubmatch(m[3], -1) {
				checked++
				if !regexp.MustCompile(regexp.QuoteMeta(f[1]) + `\b`).MatchString(helpFlags[key]) {
					t.Errorf("the README runs `%s` with %s, which it does not have", key, f[1])
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d flags: is the README's form still bin/muster-… in sh blocks?", checked)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README's install command names the server and the token so; a user
// puts theirs in their place, and so does the test.
const (
	readmeServerURL = "https://SERVER:9443"
	readmeToken     = "K10…"
)

// readmeInstallCommand is the command of the sh block under the README's
// install mark, as written.
func readmeInstallCommand(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	mark := strings.Index(text, "<!-- install:")
	if mark < 0 {
		t.Fatalf("README.md has no <!-- install: … --> mark above its install command")
	}
	rest := text[mark:]
	open := strings.Index(rest, "```")
	if open < 0 {
		t.Fatalf("README.md has no code block under its install mark")
	}
	rest = rest[open:]
	rest = rest[strings.Index(rest, "\n")+1:]
	end := strings.Index(rest, "\n```")
	if end < 0 {
		t.Fatalf("README.md's install block does not end")
	}
	return rest[:end]
}

// fillIn puts a server URL and a token in place of the README's
// placeholders, and changes nothing else.
func fillIn(t *testing.T, command, url, token string) string {
	t.Helper()
	if !strings.Contains(command, readmeServerURL) || !strings.Contains(command, readmeToken) {
		t.Fatalf("the README's install command names neither %s nor %s, which a user replaces:\n%s", readmeServerURL, readmeToken, command)
	}
	return strings.ReplaceAll(strings.ReplaceAll(command, readmeServerURL, url), readmeToken, token)
}

// runInstallCommand runs command as a user pastes it into a POSIX shell,
// with install.sh's paths in the throwaway root r.
func runInstallCommand(t *testing.T, r installRoot, command string) (string, error) {
	t.Helper()
	return runInstallCommandIn(t, "sh", r, command)
}

func runInstallCommandIn(t *testing.T, shell string, r installRoot, command string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shell, "-c", command)
	cmd.Dir = t.TempDir()
	cmd.Env = r.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// assertInstalled checks what a user checks after the install: the served
// agent binary, a unit that runs it against the server, the token in the
// 0600 env file and nowhere in the unit.
func assertInstalled(t *testing.T, r installRoot, s *server, token, out string) {
	t.Helper()
	binary := filepath.Join(r.binDir, "muster-agent")
	unit := filepath.Join(r.systemdDir, "muster-agent.service")
	envFile := filepath.Join(r.systemdDir, "muster-agent.service.env")
	for _, p := range []string{binary, unit, envFile} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the install command exited 0 but installed no %s (%v); the root holds %v; its output:\n%s", p, err, r.files(t), out)
		}
	}
	if got, want := fileSHA256(t, binary), fileSHA256(t, agentBin); got != want {
		t.Errorf("installed binary's SHA-256 %s is not the served agent's %s", got, want)
	}
	argv, env := unitExecStart(t, unit)
	if got := strings.Join(argv, " "); !strings.Contains(got, "--server "+s.url()) || strings.Contains(got, bearerOf(token)) {
		t.Errorf("the unit runs %q: want --server %s and no token", got, s.url())
	}
	if env != envFile || mode(t, envFile) != 0o600 {
		t.Errorf("the unit reads %s; the env file is %s, mode %v, want 0600", env, envFile, mode(t, envFile))
	}
	if b, _ := os.ReadFile(envFile); !strings.Contains(string(b), "MUSTER_TOKEN="+token+"\n") {
		t.Errorf("the env file does not hold the token:\n%s", b)
	}
}

// TestReadmeInstall runs the README's install command character for
// character, the URL and token filled in, against a real server with its
// private CA, in a throwaway root: it must install the agent. The same
// command against a server whose CA is not the token's, or against no
// server, must fail loudly and install nothing; and `token create
// --install-command` prints exactly the README's command for its server.
func TestReadmeInstall(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	readme := readmeInstallCommand(t)

	// Pasted into the shell a root login has: dash here (Debian's sh) and bash.
	for _, shell := range []string{"sh", "bash"} {
		t.Run("as written, in "+shell, func(t *testing.T) {
			token := newToken(t, s)
			r := newInstallRoot(t)
			out, err := runInstallCommandIn(t, shell, r, fillIn(t, readme, s.url(), token))
			if err != nil {
				t.Fatalf("the README's install command failed: %v\n%s", err, out)
			}
			assertInstalled(t, r, s, token, out)
		})
	}

	t.Run("printed by token create --install-command", func(t *testing.T) {
		printed := strings.TrimSpace(s.muster(t, "token", "create", "--install-command"))
		m := regexp.MustCompile(`MUSTER_TOKEN='(K10[^']*)'`).FindStringSubmatch(printed)
		if m == nil {
			t.Fatalf("token create --install-command printed no MUSTER_TOKEN='K10…':\n%s", printed)
		}
		if want := fillIn(t, readme, s.url(), m[1]); printed != want {
			t.Fatalf("token create --install-command printed\n%s\nnot the README's command for this server and token:\n%s", printed, want)
		}
		r := newInstallRoot(t)
		out, err := runInstallCommand(t, r, printed)
		if err != nil {
			t.Fatalf("the printed install command failed: %v\n%s", err, out)
		}
		assertInstalled(t, r, s, m[1], out)
	})

	token := newToken(t, s)
	hash := token[3:67]
	flipped := "0"
	if hash[0] == '0' {
		flipped = "1"
	}
	for _, tc := range []struct {
		name, url, token, want string
	}{
		{"a CA the token does not pin", s.url(), "K10" + flipped + hash[1:] + token[67:], "is not the one the token pins"},
		{"an unreachable server", "https://127.0.0.1:" + strconv.Itoa(freePort(t)), token, "/cacerts: check the address"},
		{"a token without the CA hash", s.url(), token[69:], "is not the one the token pins"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newInstallRoot(t)
			out, err := runInstallCommand(t, r, fillIn(t, readme, tc.url, tc.token))
			if err == nil {
				t.Fatalf("the install command exited 0; want a failure saying %q:\n%s", tc.want, out)
			}
			if !strings.Contains(out, "[muster-install] ERROR: ") || !strings.Contains(out, tc.want) {
				t.Errorf("the install command failed (%v) without saying %q:\n%s", err, tc.want, out)
			}
			if left := r.files(t); len(left) != 0 {
				t.Errorf("a failed install left files: %v", left)
			}
		})
	}
}

// TestReadmeAgentSha256 runs the README's command for an agent binary's
// SHA-256 as written, against a server with a private CA that serves the
// binary, and puts what it prints into a plan's agentUpgrade.sha256 as the
// README says: the server must take it, and it must be the binary's hash.
func TestReadmeAgentSha256(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	mark := strings.Index(text, "<!-- agent-sha256:")
	if mark < 0 {
		t.Fatalf("README.md has no <!-- agent-sha256: … --> mark above its command for an agent binary's SHA-256")
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)\n```").FindStringSubmatch(text[mark:])
	if block == nil {
		t.Fatalf("README.md has no sh block under its agent-sha256 mark")
	}
	command := block[1]
	version := regexp.MustCompile(`/assets/agent/([^/]+)/muster-agent-([a-z0-9]+)-([a-z0-9]+)\.sha256`).FindStringSubmatch(command)
	if version == nil {
		t.Fatalf("the README's command reads no /assets/agent/<version>/muster-agent-<os>-<arch>.sha256: %s", command)
	}

	// The binary the README names, in the server's --agent-binaries-dir.
	dir := t.TempDir()
	binary := filepath.Join(dir, "muster-agent-"+version[1]+"-"+version[2]+"-"+version[3])
	if err := os.WriteFile(binary, []byte("muster-agent "+version[1]), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--agent-binaries-dir", dir)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Were the command to name the server, the user would put theirs there.
	cmd := exec.CommandContext(ctx, "sh", "-c", strings.ReplaceAll(command, readmeServerURL, s.url()))
	cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG"), "KUBECONFIG="+s.kubeconfig())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the README's command for the SHA-256 failed: %v\n%s", err, out)
	}
	sum := strings.TrimSpace(string(out))
	if want := fileSHA256(t, binary); sum != want {
		t.Fatalf("the README's command printed %q, want the binary's SHA-256 %s", sum, want)
	}
	plan := `{"apiVersion":"muster.io/v1alpha1","kind":"MachinePlan","metadata":{"name":"readme-upgrade"},` +
		`"spec":{"agentUpgrade":{"version":"` + version[1] + `","sha256":"` + sum + `"}}}`
	apply := exec.CommandContext(ctx, "kubectl", "apply", "-f", "-")
	apply.Env = cmd.Env
	apply.Stdin = strings.NewReader(plan)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("a plan with the printed SHA-256 was refused: %v\n%s", err, out)
	}
}

// TestReadmeInstallShellcheck: the program the README's install command
// runs with sh -c is clean under shellcheck, as install.sh is: it runs in
// whatever POSIX sh the host has.
func TestReadmeInstallShellcheck(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Fatalf("shellcheck is not installed (apt-get install shellcheck; .ci/run installs it): %v", err)
	}
	command := readmeInstallCommand(t)
	start := strings.Index(command, " sh -c '")
	if start < 0 || !strings.HasSuffix(command, "'") {
		t.Fatalf("the README's install command is not … sh -c '<program>':\n%s", command)
	}
	program := filepath.Join(t.TempDir(), "install-command.sh")
	if err := os.WriteFile(program, []byte(command[start+len(" sh -c '"):len(command)-1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("shellcheck", "-s", "sh", program).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck of the README's install command: %v\n%s", err, out)
	}
}

// TestMachinePoolDriverBootstrap: an executable driver is handed the
// install command in bootstrap.script; run on a host as it is, it installs
// the agent under the pool machine's name, and the installed service joins
// as that Machine. The test plays the host: the driver only records what
// it was given.
func TestMachinePoolDriverBootstrap(t *testing.T) {
	t.Parallel()
	drivers, handed := t.TempDir(), t.TempDir()
	driver := `#!/bin/sh
case "$1" in
schema) cat >/dev/null; echo '{"description":"hands the bootstrap to the test","fields":[]}' ;;
create) cat >'` + handed + `/create.json'; echo '{}' ;;
status) cat >/dev/null; echo '{"exists":true}' ;;
*) cat >/dev/null ;;
esac
`
	if err := os.WriteFile(filepath.Join(drivers, "muster-driver-handoff"), []byte(driver), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--drivers-dir", drivers)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	s.mustKubectl("apply", "-f", writeFile(t, "pool.yaml", `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: handoff}
spec: {cluster: edge-east, replicas: 1, template: {driver: handoff}}
`))
	var req struct {
		Name      string `json:"name"`
		Bootstrap struct {
			Token  string `json:"token"`
			Script string `json:"script"`
		} `json:"bootstrap"`
	}
	waitFor(t, 60*time.Second, "the driver to be asked for a host", func() bool {
		b, err := os.ReadFile(filepath.Join(handed, "create.json"))
		return err == nil && json.Unmarshal(b, &req) == nil && req.Bootstrap.Script != ""
	})

	r := newInstallRoot(t)
	out, err := runInstallCommand(t, r, req.Bootstrap.Script)
	if err != nil {
		t.Fatalf("the pool's bootstrap script failed on the host: %v\n%s", err, out)
	}
	assertInstalled(t, r, s, req.Bootstrap.Token, out)
	argv, envFile := unitExecStart(t, filepath.Join(r.systemdDir, "muster-agent.service"))
	if got := " " + strings.Join(argv, " ") + " "; !strings.Contains(got, " --node-name "+req.Name+" ") {
		t.Fatalf("the unit runs %q: want --node-name %s, the pool machine's name", got, req.Name)
	}
	// What systemd would run: the unit's command with its env file.
	env, _ := os.ReadFile(envFile)
	a := runAgentBinaryEnv(t, strings.Fields(string(env)), argv[1:]...)
	defer a.kill()
	waitFor(t, 60*time.Second, "the pool machine "+req.Name+" to be Running", func() bool {
		phase, _ := s.kubectl("get", "machine", req.Name, "-o", "jsonpath={.status.phase}")
		return phase == "Running"
	})
}

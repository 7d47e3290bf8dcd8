package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandIsTheReadmes: the command `token create` prints is the one the
// README shows, placeholders aside, so that the README's is the one users
// run and TestReadmeInstall runs.
func TestCommandIsTheReadmes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := Command("https://SERVER:9443", "K10…"); !strings.Contains(string(b), "\n"+want+"\n") {
		t.Errorf("README.md does not show the install command token create prints; it should show:\n%s", want)
	}
}

// TestCommandQuoting: the program runs inside single quotes, and what is
// put around it stays one shell word each, whatever the URL holds.
func TestCommandQuoting(t *testing.T) {
	if strings.Contains(bootstrap, "'") {
		t.Fatalf("the bootstrap program holds a single quote, which ends the sh -c '…' around it")
	}
	for _, tc := range []struct{ url, token string }{
		{"https://10.0.0.2:9443", "K10abc::id.secret"},
		{"https://[fd00::1]:9443/", "K10abc::id.secret"},
		{"https://host:9443/a b;c", "it's"},
	} {
		// sh -n parses without running: a quoting slip is a syntax error.
		cmd := Command(tc.url, tc.token)
		if out, err := exec.Command("sh", "-n", "-c", cmd).CombinedOutput(); err != nil {
			t.Errorf("Command(%q, %q) does not parse: %v\n%s\n%s", tc.url, tc.token, err, out, cmd)
		}
		// What the shell assigns is the URL and token as given.
		echo := strings.Replace(cmd, " sh -c '", " sh -c 'printf \"%s|%s\" \"$MUSTER_URL\" \"$MUSTER_TOKEN\"; exit 0\n", 1)
		out, err := exec.Command("sh", "-c", echo).CombinedOutput()
		if want := strings.TrimSuffix(tc.url, "/") + "|" + tc.token; err != nil || string(out) != want {
			t.Errorf("Command(%q, %q) gives the program %q (%v), want %q", tc.url, tc.token, out, err, want)
		}
	}
}

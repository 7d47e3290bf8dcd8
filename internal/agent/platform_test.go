package agent

import (
	"runtime"
	"strings"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestPlatformOf: the platform an agent reports for each build it comes
// in: the GOARM of a 32-bit ARM build is part of it, nothing else is.
func TestPlatformOf(t *testing.T) {
	for _, c := range []struct{ goos, goarch, goarm, want string }{
		{"linux", "amd64", "", "linux/amd64"},
		{"linux", "arm64", "", "linux/arm64"},
		{"linux", "arm", "7", "linux/arm/v7"},
		{"linux", "arm", "7,softfloat", "linux/arm/v7"},
		{"linux", "arm", "6", "linux/arm/v6"},
		{"linux", "arm", "", "linux/arm"}, // built without build info
		{"linux", "arm64", "7", "linux/arm64"},
	} {
		if got := platformOf(c.goos, c.goarch, c.goarm); got != c.want {
			t.Errorf("platformOf(%s, %s, %q) = %q, want %q", c.goos, c.goarch, c.goarm, got, c.want)
		}
	}
}

// TestUpgradeSHA256: an agentUpgrade is checked against the sum of the
// agent's own platform: its entry in platforms, else sha256; a plan that
// gives neither for it fails before anything is downloaded, naming the
// platforms it does give.
func TestUpgradeSHA256(t *testing.T) {
	own := runtime.GOOS + "/" + runtime.GOARCH
	other := "linux/riscv64"
	sum := func(c byte) string { return strings.Repeat(string(c), 64) }
	for _, c := range []struct {
		name    string
		u       api.AgentUpgrade
		want    string
		refusal string
	}{
		{name: "sha256 alone", u: api.AgentUpgrade{Version: "v2", Sha256: sum('a')}, want: sum('a')},
		{name: "own platform listed", u: api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: other, Sha256: sum('b')}, {Platform: own, Sha256: sum('c')}}}, want: sum('c')},
		{name: "listed beats sha256", u: api.AgentUpgrade{Version: "v2", Sha256: sum('a'), Platforms: []api.AgentPlatformBinary{{Platform: own, Sha256: sum('c')}}}, want: sum('c')},
		{name: "sha256 for the unlisted", u: api.AgentUpgrade{Version: "v2", Sha256: sum('a'), Platforms: []api.AgentPlatformBinary{{Platform: other, Sha256: sum('b')}}}, want: sum('a')},
		{name: "own platform missing", u: api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: other, Sha256: sum('b')}}},
			refusal: "gives no SHA-256 for this machine's platform " + Platform() + " (it gives " + other + "): add {platform: " + own + ", sha256: <kubectl get --raw /assets/agent/v2/muster-agent-" + runtime.GOOS + "-" + runtime.GOARCH + ".sha256"},
	} {
		got, err := upgradeSHA256(&c.u)
		switch {
		case c.refusal == "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal) || !strings.Contains(err.Error(), "nothing was downloaded or replaced")):
			t.Errorf("%s: %q, %v; want an error saying %q", c.name, got, err, c.refusal)
		}
	}
}

package validation

import (
	"strings"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestValidateAgentUpgrade(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		u    api.AgentUpgrade
		want string // substring of the error, "" for valid
	}{
		{"valid", api.AgentUpgrade{Version: "v1.2.3+build-4_x", Sha256: sum}, ""},
		{"no version", api.AgentUpgrade{Sha256: sum}, "spec.agentUpgrade.version: Required"},
		{"traversal", api.AgentUpgrade{Version: "../etc", Sha256: sum}, "spec.agentUpgrade.version: Invalid"},
		{"slash", api.AgentUpgrade{Version: "v1/x", Sha256: sum}, "spec.agentUpgrade.version: Invalid"},
		{"too long", api.AgentUpgrade{Version: strings.Repeat("v", 65), Sha256: sum}, "spec.agentUpgrade.version: Invalid"},
		{"no sha", api.AgentUpgrade{Version: "v2"}, "spec.agentUpgrade.sha256: Required"},
		{"short sha", api.AgentUpgrade{Version: "v2", Sha256: "abc"}, "spec.agentUpgrade.sha256: Invalid"},
		{"not hex", api.AgentUpgrade{Version: "v2", Sha256: strings.Repeat("zz", 32)}, "spec.agentUpgrade.sha256: Invalid"},
		// The .sha256 asset pasted whole: the error says what to keep.
		{"sha256sum line", api.AgentUpgrade{Version: "v2", Sha256: sum + "  muster-agent-linux-amd64"}, "give only its first field"},
		{"negative timeout", api.AgentUpgrade{Version: "v2", Sha256: sum, TimeoutSeconds: -1}, "spec.agentUpgrade.timeoutSeconds"},
		// A fleet of several architectures: one sum per platform.
		{"platforms", api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: "linux/arm64", Sha256: sum}, {Platform: "linux/arm", Sha256: sum}}}, ""},
		{"platforms and default", api.AgentUpgrade{Version: "v2", Sha256: sum, Platforms: []api.AgentPlatformBinary{{Platform: "linux/arm64", Sha256: sum}}}, ""},
		{"platform with variant", api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: "linux/arm/v7", Sha256: sum}}}, "spec.agentUpgrade.platforms[0].platform: Invalid"},
		{"platform as asset name", api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: "linux-arm64", Sha256: sum}}}, "must be <os>/<arch>"},
		{"duplicate platform", api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: "linux/arm", Sha256: sum}, {Platform: "linux/arm", Sha256: sum}}}, "spec.agentUpgrade.platforms[1].platform: Duplicate"},
		{"platform without sha", api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: "linux/arm"}}}, "spec.agentUpgrade.platforms[0].sha256: Required"},
		{"platform sha256sum line", api.AgentUpgrade{Version: "v2", Platforms: []api.AgentPlatformBinary{{Platform: "linux/arm", Sha256: sum + "  muster-agent-linux-arm"}}}, "give only its first field"},
	} {
		u := tc.u
		errs := ValidateMachinePlan(&api.MachinePlan{Spec: api.MachinePlanSpec{AgentUpgrade: &u}})
		got := errs.ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: unexpected error %v", tc.name, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, got, tc.want)
		}
	}
}

package agent

import (
	"runtime"
	"runtime/debug"
)

// Platform is what this agent reports in its Machine's status.platform:
// <os>/<arch> as Go names them, with the ARM variant for 32-bit ARM
// (linux/arm/v7, as OCI images name it), since the binary for arm is one
// ARM version's build. An agentUpgrade installs muster-agent-<os>-<arch>.
func Platform() string { return platformOf(runtime.GOOS, runtime.GOARCH, buildSetting("GOARM")) }

// platformOf names a build's platform; goarm is its GOARM build setting
// ("7", or "7,softfloat"), "" if unknown.
func platformOf(goos, goarch, goarm string) string {
	p := goos + "/" + goarch
	if goarch != "arm" || goarm == "" {
		return p
	}
	// GOARM=7,softfloat: the float mode does not change what the binary
	// runs on (ARMv7 and later), only how it computes.
	for i, c := range goarm {
		if c < '0' || c > '9' {
			goarm = goarm[:i]
			break
		}
	}
	if goarm == "" {
		return p
	}
	return p + "/v" + goarm
}

// buildSetting is a build setting the go command recorded in the binary
// (go version -m shows them), "" if none.
func buildSetting(key string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

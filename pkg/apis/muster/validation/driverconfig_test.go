package validation

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/driver"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestValidateMachinePoolDriverConfig runs the admission check on a real
// driver registry: the built-in process driver and an executable one.
func TestValidateMachinePoolDriverConfig(t *testing.T) {
	dir := t.TempDir()
	cloud := `#!/bin/sh
cat >/dev/null
echo '{"description":"hosts in a cloud","fields":[{"name":"size","type":"integer","required":true},{"name":"zone","type":"string","default":"east-1"}]}'
`
	// A driver with a check of its own: it refuses zone "mars".
	strict := `#!/bin/sh
in=$(cat)
case "$1" in
schema) echo '{"fields":[{"name":"zone","type":"string"}],"validates":true}' ;;
validate) case "$in" in *mars*) echo "zone mars has no hosts; use east or west" >&2; exit 1 ;; esac ;;
esac
`
	broken := "#!/bin/sh\ncat >/dev/null\necho 'cannot read /etc/cloud/key' >&2\nexit 1\n"
	for name, script := range map[string]string{"cloud": cloud, "broken": broken, "strict": strict} {
		if err := os.WriteFile(filepath.Join(dir, "muster-driver-"+name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	drivers := driver.NewRegistry(dir, map[string]driver.Driver{"process": driver.Process{}, "ssh": &driver.SSH{KeyDir: t.TempDir()}})
	const hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	pool := func(d string, config map[string]string) *api.MachinePool {
		return &api.MachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: api.MachinePoolSpec{Template: api.MachineTemplate{Driver: d, DriverConfig: config}}}
	}
	for _, tc := range []struct {
		name string
		pool *api.MachinePool
		// want is "field: part of its message" per error, in order.
		want []string
		// unavailable: the driver cannot be asked; no field errors.
		unavailable string
	}{
		{name: "process without config", pool: pool("process", nil)},
		{name: "cloud with its required field", pool: pool("cloud", map[string]string{"size": "2", "zone": "west"})},
		{name: "process refuses any key", pool: pool("process", map[string]string{"size": "2"}),
			want: []string{`spec.template.driverConfig[size]: unknown field; driver "process" accepts networkNamespace (boolean, default false), networkCIDR (string, default 10.212.0.0/16)`}},
		// The network namespace option (issue 29): a range the driver
		// cannot give addresses from is refused at admission, not at create.
		{name: "process with a CIDR that does not parse", pool: pool("process", map[string]string{"networkNamespace": "true", "networkCIDR": "10.300.0.0/16"}),
			want: []string{`spec.template.driverConfig[networkCIDR]: driver "process" refuses it: networkCIDR "10.300.0.0/16" is not an IPv4 CIDR such as 10.212.0.0/16`}},
		{name: "process with a CIDR too small", pool: pool("process", map[string]string{"networkNamespace": "true", "networkCIDR": "10.212.0.0/30"}),
			want: []string{`spec.template.driverConfig[networkCIDR]: driver "process" refuses it: networkCIDR "10.212.0.0/30" has a /30 prefix; give one from /8 to /29`}},
		{name: "process with host bits in its CIDR", pool: pool("process", map[string]string{"networkNamespace": "true", "networkCIDR": "10.212.0.1/16"}),
			want: []string{`spec.template.driverConfig[networkCIDR]: driver "process" refuses it: networkCIDR "10.212.0.1/16" has host bits set; did you mean 10.212.0.0/16?`}},
		{name: "process with a CIDR and no namespaces", pool: pool("process", map[string]string{"networkCIDR": "10.212.0.0/16"}),
			want: []string{`spec.template.driverConfig[networkCIDR]: driver "process" refuses it: networkCIDR is used only with networkNamespace: "true"`}},
		{name: "unknown key and bad integer", pool: pool("cloud", map[string]string{"size": "two", "szone": "x"}),
			want: []string{
				`spec.template.driverConfig[size]: "two" is not an integer; driver "cloud" accepts size (integer, required), zone (string, default east-1)`,
				`spec.template.driverConfig[szone]: unknown field`,
			}},
		// The schema's types hold, but the driver's own check (the one its
		// create makes) refuses: refused here, not stored to fail later.
		{name: "ssh with a bin dir its create refuses", pool: pool("ssh", map[string]string{"host": "h", "hostKey": hostKey, "binDir": "/tmp/x;id"}),
			want: []string{`spec.template.driverConfig[binDir]: driver "ssh" refuses it: driverConfig binDir "/tmp/x;id" must be an absolute path`}},
		{name: "ssh with a good config", pool: pool("ssh", map[string]string{"host": "h", "hostKey": hostKey, "binDir": "/opt/bin"})},
		{name: "an executable's own check refuses", pool: pool("strict", map[string]string{"zone": "mars"}),
			want: []string{`spec.template.driverConfig: driver "strict" refuses it: muster-driver-strict validate: zone mars has no hosts; use east or west`}},
		{name: "an executable's own check accepts", pool: pool("strict", map[string]string{"zone": "east"})},
		{name: "missing required", pool: pool("cloud", map[string]string{"zone": "x"}),
			want: []string{`spec.template.driverConfig[size]: required by the driver`}},
		{name: "unknown driver", pool: pool("clod", nil),
			want: []string{`spec.template.driver: no driver "clod"`, "the drivers are broken, cloud, process, ssh, strict"}},
		{name: "driver that cannot give its schema", pool: pool("broken", nil),
			unavailable: "cannot read /etc/cloud/key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs, err := ValidateMachinePoolDriverConfig(context.Background(), drivers, tc.pool)
			if tc.unavailable != "" {
				if err == nil || !strings.Contains(err.Error(), tc.unavailable) || !strings.Contains(err.Error(), "muster-driver-broken schema") {
					t.Fatalf("err = %v; want the driver's failure %q and the command to fix", err, tc.unavailable)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			msgs := errs.ToAggregate()
			if tc.want == nil {
				if msgs != nil {
					t.Fatalf("refused a good pool: %v", msgs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted; want %v", tc.want)
			}
			all := msgs.Error()
			for _, part := range tc.want {
				f, msg, _ := strings.Cut(part, ": ")
				if !strings.Contains(all, f) || !strings.Contains(all, msg) {
					t.Errorf("errors %q do not say %q", all, part)
				}
			}
		})
	}
}

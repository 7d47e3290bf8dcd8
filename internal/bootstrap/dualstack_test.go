package bootstrap

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestServingSANsBothFamilies: a server listening on every address (:: or
// 0.0.0.0) is reached over either family, so its serving certificate names
// this host's first global address of each, whichever family it
// advertises; a server bound to one address names that one. A bracketed
// --advertise-address, as written in a URL, is the bare address.
func TestServingSANsBothFamilies(t *testing.T) {
	v4, v6 := firstGlobal(true), firstGlobal(false)
	if v4 == "" || v6 == "" {
		// This test's point needs a host with both; say what it has.
		t.Logf("this host's first global IPv4 %q, IPv6 %q", v4, v6)
	}
	for _, tc := range []struct {
		name, bind, advertise string
		want, notWant         []string
	}{
		{"bound to ::, advertising IPv6", "::", "2001:db8::7", []string{"2001:db8::7", "127.0.0.1", "::1", v4, v6}, nil},
		{"bound to 0.0.0.0, advertising IPv4", "0.0.0.0", "192.0.2.10", []string{"192.0.2.10", v4, v6}, nil},
		{"bracketed advertise address", "::", "[2001:db8::7]", []string{"2001:db8::7"}, []string{"[2001:db8::7]"}},
		{"bound to one address", "192.0.2.11", "192.0.2.11", []string{"192.0.2.11", "127.0.0.1", "::1"}, []string{v6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.BindAddress, cfg.AdvertiseAddress = tc.bind, tc.advertise
			st := mustEnsure(t, cfg)
			cert := readCert(t, st.Files.ServingCert)
			var ips []string
			for _, ip := range cert.IPAddresses {
				ips = append(ips, ip.String())
			}
			for _, w := range tc.want {
				if w != "" && !slices.Contains(ips, w) {
					t.Errorf("the serving certificate's IPs %v lack %s", ips, w)
				}
			}
			for _, w := range tc.notWant {
				if w != "" && slices.Contains(ips, w) && w != tc.advertise {
					t.Errorf("the serving certificate's IPs %v hold %s", ips, w)
				}
			}
			if strings.HasPrefix(tc.advertise, "[") {
				if st.AdvertiseAddress != "2001:db8::7" {
					t.Errorf("State.AdvertiseAddress = %q, want the bare 2001:db8::7", st.AdvertiseAddress)
				}
				kc, err := os.ReadFile(st.Files.AdminKubeconfig)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(kc), "server: https://[2001:db8::7]:9443") {
					t.Errorf("the admin kubeconfig does not point at https://[2001:db8::7]:9443:\n%s", kc)
				}
			}
		})
	}
}

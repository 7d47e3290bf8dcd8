package apiserver

import (
	"testing"
	"time"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/pki"
)

// TestMachineIssuedConversion: a machine certificate authenticates with the
// time the CA issued it and the cluster it names, which a rejoin after a
// restore is judged by; a person's certificate carries no issue time.
func TestMachineIssuedConversion(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	cn, groups := caller.MachineSubject("m1", "uid-1", "c1")
	machinePEM, _, err := ca.IssueClient(cn, groups, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	personPEM, _, err := ca.IssueClient("alice", []string{caller.OperatorsGroup}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		pem         []byte
		wantCluster string
		wantIssued  bool
	}{
		{"machine", machinePEM, "c1", true},
		{"person", personPEM, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certs, err := pki.ParseCertsPEM(tc.pem)
			if err != nil {
				t.Fatal(err)
			}
			resp, ok, err := machineIssuedConversion.User(certs)
			if !ok || err != nil {
				t.Fatalf("User = %v, %v", ok, err)
			}
			cluster, issued := caller.MachineCertificate(resp.User)
			if cluster != tc.wantCluster {
				t.Errorf("cluster = %q; want %q", cluster, tc.wantCluster)
			}
			if !tc.wantIssued {
				if !issued.IsZero() {
					t.Errorf("issued = %s; want none", issued)
				}
				return
			}
			if issued.Before(before.Truncate(time.Second)) || issued.After(time.Now()) {
				t.Errorf("issued = %s; want the moment it was issued (after %s)", issued, before)
			}
		})
	}
}

package main

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// --retire is refused while a machine's newest certificate is not one of
// the new CA: retiring would lock its agent out.
func TestMachinesBehind(t *testing.T) {
	oldCA, err := pki.NewCA("old")
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA("new")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *pki.CA, machine string) []byte {
		cert, _, err := ca.IssueClient("muster:machine:"+machine, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	n := 0
	reg := func(machine string, phase api.RegistrationPhase, cert []byte) api.ClusterRegistration {
		n++
		// Each registration a minute after the one before.
		at := metav1.NewTime(time.Unix(1_800_000_000+int64(n)*60, 0))
		return api.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("r", n), CreationTimestamp: at},
			Status: api.ClusterRegistrationStatus{Phase: phase, Machine: machine, Certificate: cert}}
	}
	machine := func(name string) api.Machine { return api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}} }

	oldA := issue(oldCA, "a")
	newA := issue(newCA, "a")
	tests := []struct {
		name string
		regs []api.ClusterRegistration
		want string
	}{
		{name: "renewed under the new CA", regs: []api.ClusterRegistration{reg("a", api.RegistrationPhaseGranted, oldA), reg("a", api.RegistrationPhaseGranted, newA)}, want: "[]"},
		{name: "only the old CA's", regs: []api.ClusterRegistration{reg("a", api.RegistrationPhaseGranted, oldA)}, want: "[a]"},
		{name: "no registration left", want: "[a]"},
		{name: "an old-CA certificate granted after the new one", regs: []api.ClusterRegistration{reg("a", api.RegistrationPhaseGranted, newA), reg("a", api.RegistrationPhaseGranted, oldA)}, want: "[a]"},
		{name: "a renewal not granted", regs: []api.ClusterRegistration{reg("a", api.RegistrationPhaseGranted, oldA), reg("a", api.RegistrationPhasePending, newA)}, want: "[a]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmt.Sprint(machinesBehind([]api.Machine{machine("a")}, tt.regs, newCA.CertPEM)); got != tt.want {
				t.Errorf("machinesBehind = %s, want %s", got, tt.want)
			}
		})
	}
}

package server

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/muster-io/muster/internal/driver"
)

// TestOfferProcessDriver: the process driver exists only when an admin
// turned it on, never keeps its machines inside the data dir, and never
// runs them as root when a user is named (issue 27).
func TestOfferProcessDriver(t *testing.T) {
	data := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
		// offered: the registry has "process"; err: part of start's error.
		offered bool
		err     string
	}{
		{name: "off by default", cfg: Config{DataDir: data}},
		{name: "on, beside the data dir", cfg: Config{DataDir: data, EnableProcessDriver: true}, offered: true},
		{name: "on, inside the data dir", cfg: Config{DataDir: data, EnableProcessDriver: true, ProcessDriverDir: filepath.Join(data, "pools")}, err: "inside the data dir"},
		{name: "on, the data dir itself", cfg: Config{DataDir: data, EnableProcessDriver: true, ProcessDriverDir: data + "/."}, err: "inside the data dir"},
		{name: "as root", cfg: Config{DataDir: data, EnableProcessDriver: true, ProcessDriverUser: "root"}, err: "not root"},
		{name: "as a user that does not exist", cfg: Config{DataDir: data, EnableProcessDriver: true, ProcessDriverUser: "no-such-user-here"}, err: "no such user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := driver.NewRegistry("", nil)
			err := offerProcessDriver(r, tc.cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v; want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d, err := r.Lookup("process")
			if !tc.offered {
				var unknown *driver.UnknownError
				if !errors.As(err, &unknown) || !strings.Contains(err.Error(), "--enable-process-driver") || strings.Contains(strings.Join(r.Names(), ","), "process") {
					t.Fatalf("Lookup(process) = %v, %v; names %v: want it refused saying how to enable it, and not listed", d, err, r.Names())
				}
				return
			}
			p, ok := d.(driver.Process)
			if err != nil || !ok || p.Dir != ProcessDriverDefaultDir(data) {
				t.Fatalf("Lookup(process) = %#v, %v; want the process driver in %s", d, err, ProcessDriverDefaultDir(data))
			}
		})
	}
}

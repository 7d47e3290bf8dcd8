package pki

import "sync/atomic"

// Current is the CA in force where a rotation may replace it while the
// server runs (muster-server certificate rotate-ca): whoever signs loads
// it at each signature, and the rotation's reloader swaps it whole.
type Current struct{ ca atomic.Pointer[CA] }

// NewCurrent is a Current holding ca.
func NewCurrent(ca *CA) *Current {
	c := &Current{}
	c.ca.Store(ca)
	return c
}

// Load is the CA in force now.
func (c *Current) Load() *CA { return c.ca.Load() }

// Rotate puts ca in force for every signature from now on.
func (c *Current) Rotate(ca *CA) { c.ca.Store(ca) }

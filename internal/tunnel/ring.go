package tunnel

import (
	"bytes"
	"sync"
)

// Ring keeps the agent's most recent log lines, bounded in bytes, for
// `kubectl muster logs`: what the agent said lately, without a file on the
// machine or a journal to read.
type Ring struct {
	mu      sync.Mutex
	max     int
	lines   [][]byte
	size    int
	partial []byte
}

// NewRing returns a ring that keeps about maxBytes of the latest lines.
func NewRing(maxBytes int) *Ring { return &Ring{max: maxBytes} }

// Write implements io.Writer; whole lines are kept, the oldest dropped.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			r.partial = append(r.partial, p...)
			if len(r.partial) > r.max {
				r.partial = r.partial[len(r.partial)-r.max:]
			}
			break
		}
		line := append(r.partial, p[:i+1]...)
		r.partial = nil
		p = p[i+1:]
		if len(line) > r.max {
			line = line[len(line)-r.max:]
		}
		r.lines = append(r.lines, line)
		r.size += len(line)
		for r.size > r.max && len(r.lines) > 0 {
			r.size -= len(r.lines[0])
			r.lines = r.lines[1:]
		}
	}
	return n, nil
}

// Bytes is a copy of the kept lines, oldest first.
func (r *Ring) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]byte, 0, r.size+len(r.partial))
	for _, l := range r.lines {
		out = append(out, l...)
	}
	return append(out, r.partial...)
}

package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// schemaCache keeps the schema each executable printed, keyed by its path
// and the file's modification time and size: replacing a driver (a new
// mtime) asks it again, and until then admission never forks it. Failures
// are not kept, so a fixed driver is used at once.
type schemaCache struct {
	mu      sync.Mutex
	entries map[string]cachedSchema
}

type cachedSchema struct {
	mtime  time.Time
	size   int64
	schema Schema
}

func (c *schemaCache) get(ctx context.Context, e executable) (Schema, error) {
	fi, err := os.Stat(e.path)
	if err != nil {
		return Schema{}, fmt.Errorf("driver %s: %w", e.path, err)
	}
	c.mu.Lock()
	hit, ok := c.entries[e.path]
	c.mu.Unlock()
	if ok && hit.mtime.Equal(fi.ModTime()) && hit.size == fi.Size() {
		return hit.schema, nil
	}
	// Concurrent misses each ask the driver; a schema call is cheap, and
	// holding the lock through it would queue every pool write behind one
	// slow driver.
	s, err := e.Schema(ctx)
	if err != nil {
		name := filepath.Base(e.path)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Schema{}, fmt.Errorf("%s did not print its schema within %s; make `%s schema` print its JSON schema at once (see the driver protocol in internal/driver)", name, SchemaTimeout, e.path)
		}
		return Schema{}, fmt.Errorf("%v; fix %s so that `%s schema` with {} on stdin prints its JSON schema and exits 0", err, name, e.path)
	}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]cachedSchema{}
	}
	c.entries[e.path] = cachedSchema{mtime: fi.ModTime(), size: fi.Size(), schema: s}
	c.mu.Unlock()
	return s, nil
}

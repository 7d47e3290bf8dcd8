package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSchemaCheck(t *testing.T) {
	s := Schema{Fields: []Field{
		{Name: "size", Type: FieldInteger, Required: true},
		{Name: "zone", Type: FieldString, Default: "east-1"},
		{Name: "spot", Type: FieldBoolean},
	}}
	for _, tc := range []struct {
		name   string
		config map[string]string
		want   map[string]string // key -> a part of its message
	}{
		{"all good", map[string]string{"size": "3", "zone": "west", "spot": "true"}, nil},
		{"required only", map[string]string{"size": "-1"}, nil},
		{"nil config misses the required", nil, map[string]string{"size": "required"}},
		{"unknown key", map[string]string{"size": "1", "szie": "2"}, map[string]string{"szie": "unknown field"}},
		{"bad integer", map[string]string{"size": "three"}, map[string]string{"size": `"three" is not an integer`}},
		{"integer overflow", map[string]string{"size": "99999999999999999999"}, map[string]string{"size": "not an integer"}},
		{"bad boolean", map[string]string{"size": "1", "spot": "maybe"}, map[string]string{"spot": "not true or false"}},
		{"too long", map[string]string{"size": "1", "zone": strings.Repeat("z", maxConfigValue+1)}, map[string]string{"zone": "at most 4096"}},
		{"several", map[string]string{"zone": "x", "what": "y"}, map[string]string{"size": "required", "what": "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.Check(tc.config)
			if len(got) != len(tc.want) {
				t.Fatalf("Check(%v) = %v; want problems with %v", tc.config, got, tc.want)
			}
			for k, part := range tc.want {
				if !strings.Contains(got[k], part) {
					t.Errorf("problem of %s = %q; want it to say %q", k, got[k], part)
				}
			}
		})
	}
	if got := (Schema{Fields: []Field{}}).Check(map[string]string{"a": "b"}); got["a"] == "" {
		t.Errorf("a driver with no fields accepted config key a: %v", got)
	}
}

func TestSchemaValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Schema
		ok   bool
	}{
		{"empty", Schema{}, true},
		{"all types", Schema{Fields: []Field{{Name: "a", Type: "string"}, {Name: "b", Type: "integer"}, {Name: "c", Type: "boolean"}}}, true},
		{"unnamed", Schema{Fields: []Field{{Type: "string"}}}, false},
		{"repeated", Schema{Fields: []Field{{Name: "a", Type: "string"}, {Name: "a", Type: "integer"}}}, false},
		{"unknown type", Schema{Fields: []Field{{Name: "a", Type: "float"}}}, false},
		{"no type", Schema{Fields: []Field{{Name: "a"}}}, false},
	} {
		if err := tc.s.Valid(); (err == nil) != tc.ok {
			t.Errorf("%s: Valid() = %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}

// writeDriver puts an executable driver script in dir.
func writeDriver(t *testing.T, dir, name, script string) string {
	t.Helper()
	path := filepath.Join(dir, "muster-driver-"+name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// schemaScript answers schema with one required integer field, and
// appends a line to calls each time it is asked, so tests can count forks.
func schemaScript(calls, description string) string {
	return `cat >/dev/null
echo schema >>` + calls + `
echo '{"description":"` + description + `","fields":[{"name":"size","type":"integer","required":true}]}'
`
}

func TestRegistrySchema(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	writeDriver(t, dir, "cloud", schemaScript(calls, "v1"))
	writeDriver(t, dir, "garbled", "cat >/dev/null\necho not json\n")
	writeDriver(t, dir, "failing", "cat >/dev/null\necho 'no credentials for region east-1' >&2\nexit 3\n")
	writeDriver(t, dir, "invalid", `cat >/dev/null; echo '{"fields":[{"name":"a","type":"float"}]}'`+"\n")
	if err := os.WriteFile(filepath.Join(dir, "muster-driver-notexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not a driver"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory has the x bits but is no driver.
	if err := os.Mkdir(filepath.Join(dir, "muster-driver-adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(dir, map[string]Driver{"process": Process{}})
	ctx := context.Background()

	if got, want := r.Names(), []string{"cloud", "failing", "garbled", "invalid", "process"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v; want %v", got, want)
	}
	// The process driver's one option: a network namespace per machine.
	if s, err := r.Schema(ctx, "process"); err != nil || s.Description == "" || len(s.Fields) != 2 || s.Fields[0].Name != ConfigNetworkNamespace || s.Fields[1].Name != ConfigNetworkCIDR || s.Valid() != nil {
		t.Errorf("the process driver's schema: %+v, %v", s, err)
	}
	s, err := r.Schema(ctx, "cloud")
	if err != nil || s.Description != "v1" || len(s.Fields) != 1 || !s.Fields[0].Required {
		t.Fatalf("the cloud driver's schema: %+v, %v", s, err)
	}

	for _, tc := range []struct{ name, want string }{
		{"missing", "missing or not an executable file"},
		{"notexec", "missing or not an executable file"},
		{"Bad_Name", "not a valid driver name"},
		{"adir", "missing or not an executable file"},
	} {
		_, err := r.Schema(ctx, tc.name)
		var unknown *UnknownError
		if !errors.As(err, &unknown) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "cloud, failing, garbled, invalid, process") {
			t.Errorf("Schema(%q) = %v; want an UnknownError saying %q and naming the drivers", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct{ name, want string }{
		{"failing", "no credentials for region east-1"},
		{"garbled", "printed no JSON"},
		{"invalid", `type "float"`},
	} {
		_, err := r.Schema(ctx, tc.name)
		var unknown *UnknownError
		if err == nil || errors.As(err, &unknown) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "muster-driver-"+tc.name+" schema") {
			t.Errorf("Schema(%q) = %v; want the driver's failure (%q) and the command to fix", tc.name, err, tc.want)
		}
	}

	// Without a drivers dir, an unknown driver's error says so.
	_, err = NewRegistry("", map[string]Driver{"process": Process{}}).Schema(ctx, "cloud")
	if err == nil || !strings.Contains(err.Error(), "no --drivers-dir") || !strings.Contains(err.Error(), "process") {
		t.Errorf("without a drivers dir: %v", err)
	}
}

// countLines is how many times a schemaScript driver ran.
func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestRegistrySchemaCache: an executable is asked once per version of its
// file; replacing it asks again; failures are not kept.
func TestRegistrySchemaCache(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	path := writeDriver(t, dir, "cloud", schemaScript(calls, "v1"))
	r := NewRegistry(dir, nil)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := r.Schema(ctx, "cloud"); err != nil {
			t.Fatal(err)
		}
	}
	if n := countLines(t, calls); n != 1 {
		t.Fatalf("5 schema lookups ran the driver %d times; want 1", n)
	}

	// A new version of the driver (another mtime) is asked again.
	writeDriver(t, dir, "cloud", schemaScript(calls, "v2"))
	if err := os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if s, err := r.Schema(ctx, "cloud"); err != nil || s.Description != "v2" {
		t.Fatalf("after replacing the driver: %+v, %v; want v2", s, err)
	}
	if n := countLines(t, calls); n != 2 {
		t.Fatalf("the replaced driver ran %d times in all; want 2", n)
	}

	// A failing version is asked every time, so a fix is used at once.
	writeDriver(t, dir, "cloud", "cat >/dev/null\necho "+"schema >>"+calls+"\nexit 1\n")
	if err := os.Chtimes(path, time.Now(), time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := r.Schema(ctx, "cloud"); err == nil {
			t.Fatal("a failing driver's schema call succeeded")
		}
	}
	if n := countLines(t, calls); n != 4 {
		t.Fatalf("the failing driver ran %d times in all; want 4 (failures are not cached)", n)
	}
}

// TestRegistrySchemaTimeout: a driver that hangs on schema is given up on
// at the deadline, with its children, and the error says so.
func TestRegistrySchemaTimeout(t *testing.T) {
	dir := t.TempDir()
	writeDriver(t, dir, "slow", "cat >/dev/null\nsleep 60\n")
	r := NewRegistry(dir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.Schema(ctx, "slow")
	if err == nil || !strings.Contains(err.Error(), "did not print its schema within") {
		t.Fatalf("a hanging driver: %v; want a timeout naming the fix", err)
	}
	// The deadline plus cmd.WaitDelay for the orphaned sleep, not the sleep's 60 s.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the schema call returned after %v", d)
	}
}

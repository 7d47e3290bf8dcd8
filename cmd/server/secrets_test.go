package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "endpoint")
	if err := os.WriteFile(file, []byte("postgres://u:pw@db/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string { return func(string) string { return v } }
	tests := []struct {
		name, value, file, env string
		want, wantErr          string
	}{
		{name: "nothing: empty", want: ""},
		{name: "the flag", value: "postgres://flag", env: "postgres://env", want: "postgres://flag"},
		{name: "the file before the environment, newline dropped", file: file, env: "postgres://env", want: "postgres://u:pw@db/x"},
		{name: "the environment", env: "postgres://env", want: "postgres://env"},
		{name: "flag and file are one too many", value: "x", file: file, wantErr: "--datastore-endpoint and --datastore-endpoint-file are both given"},
		{name: "a missing file", file: filepath.Join(dir, "nope"), wantErr: "--datastore-endpoint-file: open"},
		{name: "an empty file", file: empty, wantErr: "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := secretSource{flag: "datastore-endpoint", fileFlag: "datastore-endpoint-file", env: "MUSTER_DATASTORE_ENDPOINT", value: tt.value, file: tt.file, getenv: env(tt.env)}
			got, err := s.resolve()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("resolve = %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("resolve = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestPasswordInURL(t *testing.T) {
	for in, want := range map[string]bool{
		"": false, "postgres://u@db/x": false, "postgres://u:pw@db/x": true, "https://etcd:2379": false,
	} {
		if got := passwordInURL(in); got != want {
			t.Errorf("passwordInURL(%q) = %v, want %v", in, got, want)
		}
	}
}

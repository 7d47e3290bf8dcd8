package bootstrap

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestSealedCAOpensOnlyWithItsToken(t *testing.T) {
	st := mustEnsure(t, testConfig(t))
	blob, err := SealCA(st.Token, st.CA)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := st.CA.KeyPEM()
	if bytes.Contains(blob, keyPEM) || bytes.Contains(blob, []byte("PRIVATE KEY")) {
		t.Fatal("the sealed blob holds the CA key in the clear")
	}
	tests := []struct {
		name    string
		token   string
		blob    []byte
		wantErr error
		errText string
	}{
		{name: "same token", token: st.Token, blob: blob},
		{name: "other token", token: strings.Repeat("f", 64), blob: blob, wantErr: ErrWrongToken},
		{name: "tampered blob", token: st.Token, blob: bytes.Replace(blob, []byte(`"data":"`), []byte(`"data":"AAAA`), 1), wantErr: ErrWrongToken},
		{name: "not a sealed blob", token: st.Token, blob: []byte("{}"), errText: "not in a format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca, err := OpenCA(tt.token, tt.blob)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("OpenCA: got %v, want %v", err, tt.wantErr)
				}
			case tt.errText != "":
				if err == nil || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("OpenCA: got %v, want an error saying %q", err, tt.errText)
				}
			case err != nil:
				t.Fatalf("OpenCA: %v", err)
			case !bytes.Equal(ca.CertPEM, st.CA.CertPEM) || !bytes.Equal(ca.KeyPEM, keyPEM):
				t.Fatal("OpenCA returned another CA")
			}
		})
	}
}

// A second server's data dir takes the shared CA, and Ensure then issues
// its certificates from it; a data dir with another CA is refused untouched.
func TestInstallCA(t *testing.T) {
	first := mustEnsure(t, testConfig(t))
	keyPEM, _ := first.CA.KeyPEM()
	shared := &SharedCA{CertPEM: first.CA.CertPEM, KeyPEM: keyPEM}

	fresh := testConfig(t)
	if err := InstallCA(fresh.DataDir, shared, false); err != nil {
		t.Fatalf("InstallCA into an empty data dir: %v", err)
	}
	fresh.Token = first.Token
	second := mustEnsure(t, fresh)
	if second.GeneratedCA || !bytes.Equal(second.CA.CertPEM, first.CA.CertPEM) {
		t.Fatal("the second data dir did not use the shared CA")
	}
	if err := InstallCA(fresh.DataDir, shared, false); err != nil {
		t.Fatalf("InstallCA of the same CA again: %v", err)
	}

	other := mustEnsure(t, testConfig(t))
	before := snapshot(t, other.Files)
	err := InstallCA(other.Files.Dir, shared, false)
	if err == nil || !strings.Contains(err.Error(), "belongs to another deployment") {
		t.Fatalf("InstallCA over another CA: got %v, want a refusal", err)
	}
	if diff := changed(before, snapshot(t, other.Files)); len(diff) > 0 {
		t.Fatalf("a refused InstallCA changed %v", diff)
	}
	if err := InstallCA(other.Files.Dir, shared, true); err != nil {
		t.Fatalf("InstallCA with replace: %v", err)
	}
	cfg := testConfig(t)
	cfg.DataDir, cfg.Token = other.Files.Dir, other.Token
	replaced := mustEnsure(t, cfg)
	if !bytes.Equal(replaced.CA.CertPEM, first.CA.CertPEM) {
		t.Fatal("after replace the data dir does not use the shared CA")
	}
	if mode(t, replaced.Files.CAKey) != secretMode {
		t.Fatalf("the CA key is %o, want %o", mode(t, replaced.Files.CAKey), secretMode)
	}
}

func TestTokenFlagMustMatchTheDataDir(t *testing.T) {
	cfg := testConfig(t)
	cfg.Token = "short"
	if _, err := Ensure(cfg); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("a short --token: got %v", err)
	}
	cfg.Token = strings.Repeat("a", 32)
	st := mustEnsure(t, cfg)
	if st.Token != cfg.Token {
		t.Fatalf("token %q, want the one given", st.Token)
	}
	cfg.Token = strings.Repeat("b", 32)
	if _, err := Ensure(cfg); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("a --token differing from the data dir's: got %v", err)
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

package nodepassword

import (
	"strings"
	"testing"
)

func TestHashVerify(t *testing.T) {
	pw, err := Generate()
	if err != nil || Validate(pw) != nil {
		t.Fatalf("Generate = %q, %v", pw, err)
	}
	h1, _ := Hash(pw)
	h2, _ := Hash(pw)
	if h1 == h2 {
		t.Error("two hashes of one password are equal: no salt")
	}
	if strings.Contains(h1, pw) {
		t.Error("the hash contains the password")
	}
	cases := []struct {
		hash, pw string
		ok       bool
		err      bool
	}{
		{h1, pw, true, false},
		{h2, pw, true, false},
		{h1, pw + "0", false, false},
		{h1, strings.ToUpper(pw), false, false},
		{"scrypt$x$y$z", pw, false, true},
		{"garbage", pw, false, true},
	}
	for _, tc := range cases {
		ok, err := Verify(tc.hash, tc.pw)
		if ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("Verify(%q) = %v, %v; want %v, err=%v", tc.hash, ok, err, tc.ok, tc.err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, pw string
		want     string // part of the error; "" means accepted
	}{
		{"generated", "3f9c2a7e0b14d85c6e2f91a0c47b3d58", ""},
		{"upper case hex", "3F9C2A7E0B14D85C6E2F91A0C47B3D58", ""},
		{"longer than 32", "3f9c2a7e0b14d85c6e2f91a0c47b3d5871a0c4", ""},
		{"empty", "", "32 to 256 hex digits"},
		{"31 digits", "3f9c2a7e0b14d85c6e2f91a0c47b3d5", "32 to 256 hex digits"},
		{"too long", strings.Repeat("3f9c2a7e0b14d85c", 17), "32 to 256 hex digits"},
		{"not hex", "3f9c2a7e0b14d85c6e2f91a0c47b3d5z", "hex digits (0-9, a-f) only, character 32"},
		{"passphrase", "correct horse battery staple ok!", "hex digits"},
		{"all one character", strings.Repeat("a", 32), "only 1 different hex digits"},
		{"two characters", strings.Repeat("ab", 16), "only 2 different hex digits"},
		{"few digits", "0110100111010010110100101101001101", "only 2 different"},
		{"counting up", "0123456789abcdef0123456789abcdef", "only 1 different steps"},
		{"up and down", "0123456789abcdeffedcba9876543210", "different steps"},
		{"half repeated", "3f9c2a7e0b14d85c3f9c2a7e0b14d85c", "repeats a pattern of 16 characters"},
		{"repeated with a cut tail", "3f9c2a7e0b14d853f9c2a7e0b14d853f9", "repeats a pattern of 15 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.pw)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error with %q", err, tc.want)
			case err != nil && len(tc.pw) >= 8 && strings.Contains(err.Error(), tc.pw):
				t.Fatalf("the error repeats the password: %v", err)
			case err != nil && !strings.Contains(err.Error(), "muster-agent generates"):
				t.Fatalf("the error does not say what to do: %v", err)
			}
		})
	}
}

// TestGeneratedPasswordsPass: the checks must never refuse what the agent
// generates (a false refusal would lock a node out at random).
func TestGeneratedPasswordsPass(t *testing.T) {
	for i := 0; i < 20000; i++ {
		pw, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(pw); err != nil {
			t.Fatalf("generated password refused: %v", err)
		}
	}
}

// BenchmarkVerify is the per-check cost quoted in docs/security.md.
func BenchmarkVerify(b *testing.B) {
	pw, _ := Generate()
	h, _ := Hash(pw)
	for i := 0; i < b.N; i++ {
		if ok, _ := Verify(h, pw); !ok {
			b.Fatal("mismatch")
		}
	}
}

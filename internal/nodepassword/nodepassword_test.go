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
		pw string
		ok bool
	}{
		{strings.Repeat("a", 32), true},
		{strings.Repeat("a", 31), false},
		{"", false},
		{strings.Repeat("a", 257), false},
	} {
		if err := Validate(tc.pw); (err == nil) != tc.ok {
			t.Errorf("Validate(len %d) = %v", len(tc.pw), err)
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

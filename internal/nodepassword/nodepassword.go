// Package nodepassword is the node password: the secret an agent generates
// once per node and presents at every registration, and the hash the server
// keeps of it (in a NodePassword object) to refuse a second machine that
// claims the same node name.
//
// The hash is a salted SHA-256, not scrypt as in k3s. The password is 128
// random bits made by the agent, and shorter or visibly non-random ones are
// refused (Validate), so there is no dictionary to search and a slow hash
// buys nothing but CPU: at scrypt's 50–100 ms per check a registration
// storm of thousands of nodes would be bound by it. docs/security.md has
// the figures.
package nodepassword

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

const (
	algorithm = "sha256"
	params    = "v1"
	// MinLength is the shortest accepted password: 32 hex digits, 128 bits.
	MinLength = 32
	maxLength = 256
)

// Generate makes a new random node password (128 bits, hex).
func Generate() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// minDistinct is the fewest different hex digits (and different steps
// between neighbouring digits) a password may have. 32 random hex digits
// show about 14; fewer than 8 happens by chance with a probability below
// 1e-7, while "aaaa…", "abab…" and "0123…fedc…" have 1 to 2.
const minDistinct = 8

// Validate refuses passwords too weak for a fast hash: the salted SHA-256
// is safe only for 128 random bits, which the server cannot measure but can
// refuse the obvious counterfeits of (a person's or a script's choice).
// Errors never repeat the password.
func Validate(password string) error {
	const fix = "use the password muster-agent generates (32 random hex digits, 128 bits, in the node-password file of its data dir; delete that file to make a new one)"
	if len(password) < MinLength || len(password) > maxLength {
		return fmt.Errorf("a node password must be %d to %d hex digits, this one has %d characters: %s", MinLength, maxLength, len(password), fix)
	}
	digits := make([]int, len(password))
	for i := 0; i < len(password); i++ {
		d := strings.IndexByte("0123456789abcdef", lower(password[i]))
		if d < 0 {
			return fmt.Errorf("a node password must be hex digits (0-9, a-f) only, character %d is not: %s", i+1, fix)
		}
		digits[i] = d
	}
	if n := distinct(digits); n < minDistinct {
		return fmt.Errorf("a node password must look random, this one uses only %d different hex digits (at least %d needed): %s", n, minDistinct, fix)
	}
	steps := make([]int, len(digits)-1)
	for i := range steps {
		steps[i] = (digits[i+1] - digits[i] + 16) % 16
	}
	if n := distinct(steps); n < minDistinct {
		return fmt.Errorf("a node password must look random, this one is a sequence with only %d different steps between digits (at least %d needed): %s", n, minDistinct, fix)
	}
	if p := period(password); p > 0 {
		return fmt.Errorf("a node password must look random, this one repeats a pattern of %d characters: %s", p, fix)
	}
	return nil
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func distinct(vs []int) int {
	var seen [16]bool
	n := 0
	for _, v := range vs {
		if !seen[v] {
			seen[v], n = true, n+1
		}
	}
	return n
}

// period returns the length of the shortest pattern whose repetition
// (the last copy possibly cut short) makes up s, if it repeats at least
// twice; 0 when s is no such repetition. A random string of 32 hex digits is
// one with a probability of at most 16^-16.
func period(s string) int {
	for p := 1; p <= len(s)/2; p++ {
		if strings.EqualFold(s[p:], s[:len(s)-p]) {
			return p
		}
	}
	return 0
}

// Hash returns "sha256$v1$<salt>$<hash>" for password.
func Hash(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	return format(hex.EncodeToString(salt), password), nil
}

func format(salt, password string) string {
	sum := sha256.Sum256([]byte(salt + "$" + password))
	return strings.Join([]string{algorithm, params, salt, hex.EncodeToString(sum[:])}, "$")
}

// ErrMalformedHash means a stored hash cannot be parsed.
var ErrMalformedHash = errors.New("malformed node password hash")

// Verify reports whether password matches hash, in constant time.
func Verify(hash, password string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 4 || parts[0] != algorithm || parts[1] != params {
		return false, ErrMalformedHash
	}
	return subtle.ConstantTimeCompare([]byte(hash), []byte(format(parts[2], password))) == 1, nil
}

// Package nodepassword is the node password: the secret an agent generates
// once per node and presents at every registration, and the hash the server
// keeps of it (in a NodePassword object) to refuse a second machine that
// claims the same node name.
//
// The hash is a salted SHA-256, not scrypt as in k3s. The password is 128
// random bits made by the agent and shorter ones are refused, so there is no
// dictionary to search and a slow hash buys nothing but CPU: at scrypt's
// 50–100 ms per check a registration storm of thousands of nodes would be
// bound by it. docs/security.md has the figures.
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

// Validate refuses passwords too weak for a fast hash.
func Validate(password string) error {
	if len(password) < MinLength || len(password) > maxLength {
		return fmt.Errorf("a node password must be %d to %d characters (the agent generates 32 random hex digits)", MinLength, maxLength)
	}
	return nil
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

package s3store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/snapshot/s3store"
	"github.com/muster-io/muster/internal/testenv/s3test"
)

func newStore(t *testing.T, srv *s3test.Server, bucket, prefix, secret string) *s3store.Store {
	t.Helper()
	s, err := s3store.New(s3store.Config{
		Endpoint: srv.Endpoint, Insecure: true, Bucket: bucket, Prefix: prefix, Region: srv.Region,
		CredentialsFile: srv.CredentialsFile(t, secret),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeFile(t *testing.T, dir, name string, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// An upload lands under the prefix, verified by the SHA-256 the server
// stored, and a download gives back the same bytes in a file of mode 0600.
func TestUploadVerifyDownload(t *testing.T) {
	srv := s3test.Start(t)
	srv.MakeBucket(t, "backups")
	s := newStore(t, srv, "backups", "/site-a/muster/", "")
	ctx := context.Background()
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	file, want := writeFile(t, t.TempDir(), "muster-20260101T000000.000Z.snapshot", 3<<20)
	up, err := s.Upload(ctx, file, filepath.Base(file))
	if err != nil {
		t.Fatalf("upload: %v\n%s", err, srv.Log())
	}
	if up.Verified != "SHA-256" {
		t.Errorf("the upload was verified by %q, want the SHA-256 the server keeps", up.Verified)
	}
	if got := srv.Keys(t, "backups", ""); !slices.Equal(got, []string{"site-a/muster/muster-20260101T000000.000Z.snapshot"}) {
		t.Errorf("the bucket holds %v", got)
	}
	dl, err := s.Download(ctx, filepath.Base(file), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dl)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the download differs from the upload (%d bytes, want %d)", len(got), len(want))
	}
	if fi, _ := os.Stat(dl); fi.Mode().Perm() != 0o600 {
		t.Errorf("the downloaded snapshot has mode %v, want 0600: it holds the sealed CA and every object", fi.Mode().Perm())
	}
}

// Retention keeps the newest scheduled snapshots under the prefix and
// touches nothing else: on-demand snapshots, other prefixes.
func TestUploadScheduledKeepsNewest(t *testing.T) {
	srv := s3test.Start(t)
	srv.MakeBucket(t, "backups")
	ctx := context.Background()
	dir := t.TempDir()
	other := newStore(t, srv, "backups", "other", "")
	f, _ := writeFile(t, dir, "muster-20250101T000000.000Z.snapshot", 100)
	if _, err := other.Upload(ctx, f, filepath.Base(f)); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, srv, "backups", "muster", "")
	od, _ := writeFile(t, dir, "on-demand.snapshot", 100)
	if _, err := s.Upload(ctx, od, "on-demand-x.snapshot"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		f, _ := writeFile(t, dir, fmt.Sprintf("muster-2026010%dT000000.000Z.snapshot", i+1), 1000)
		if _, _, err := s.UploadScheduled(ctx, f, 3); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"muster/muster-20260103T000000.000Z.snapshot", "muster/muster-20260104T000000.000Z.snapshot",
		"muster/muster-20260105T000000.000Z.snapshot", "muster/on-demand-x.snapshot",
		"other/muster-20250101T000000.000Z.snapshot",
	}
	got := srv.Keys(t, "backups", "")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("after 5 scheduled uploads keeping 3, the bucket holds\n%v\nwant\n%v", got, want)
	}
}

// A wrong secret and a missing bucket are each said plainly, and leave
// nothing in the store.
func TestRefusals(t *testing.T) {
	srv := s3test.Start(t)
	srv.MakeBucket(t, "backups")
	file, _ := writeFile(t, t.TempDir(), "muster-20260101T000000.000Z.snapshot", 1000)
	for _, tc := range []struct {
		name, bucket, secret string
		want                 string
	}{
		{"wrong secret", "backups", "not-the-secret", "refused the secret key"},
		{"missing bucket", "no-such-bucket", "", `bucket "no-such-bucket" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, srv, tc.bucket, "muster", tc.secret)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check: %v, want an error saying %q", err, tc.want)
			}
			if _, err := s.Upload(ctx, file, filepath.Base(file)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Upload: %v, want an error saying %q", err, tc.want)
			}
			if _, err := s.Download(ctx, filepath.Base(file), t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Download: %v, want an error saying %q", err, tc.want)
			}
			if keys := srv.Keys(t, "backups", ""); len(keys) != 0 {
				t.Errorf("the bucket holds %v after a refused upload", keys)
			}
		})
	}
}

// Credentials come from a file only the owner can read, or the
// environment; anything else is refused before any request.
func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := "[other]\naws_access_key_id = X\n[default]\naws_access_key_id = AKIA\naws_secret_access_key = s3cr3t\n"
	for _, tc := range []struct {
		name string
		file string
		env  [2]string
		want string // "" for accepted
	}{
		{"file 0600", write("ok", good, 0o600), [2]string{}, ""},
		{"file readable by others", write("open", good, 0o644), [2]string{}, "readable by other users: run chmod 600"},
		{"file without the keys", write("empty", "[default]\nregion = x\n", 0o600), [2]string{}, "no aws_access_key_id and aws_secret_access_key"},
		{"missing file", filepath.Join(dir, "absent"), [2]string{}, "no such file"},
		{"environment", "", [2]string{"AKIA", "s3cr3t"}, ""},
		{"nothing", "", [2]string{}, "no object store credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AWS_ACCESS_KEY_ID", tc.env[0])
			t.Setenv("AWS_SECRET_ACCESS_KEY", tc.env[1])
			_, err := s3store.New(s3store.Config{Endpoint: "s3.example.com", Bucket: "b", CredentialsFile: tc.file})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

// A plain-HTTP endpoint is refused unless asked for: a snapshot holds the
// sealed CA and every object.
func TestEndpoints(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "a")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "b")
	for _, tc := range []struct {
		endpoint string
		insecure bool
		want     string
	}{
		{"s3.example.com", false, ""},
		{"https://s3.example.com:9000", false, ""},
		{"http://127.0.0.1:9000", true, ""},
		{"http://127.0.0.1:9000", false, "plain HTTP"},
		{"ftp://x", false, `scheme "ftp"`},
		{"https://s3.example.com/bucket", false, "not host[:port]"},
	} {
		_, err := s3store.New(s3store.Config{Endpoint: tc.endpoint, Insecure: tc.insecure, Bucket: "b"})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.endpoint, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error saying %q", tc.endpoint, err, tc.want)
		}
	}
}

// An object damaged in the store (its bytes changed behind the server's
// back, the checksum it keeps unchanged) is refused by a download, and no
// file is left behind.
func TestDownloadRefusesDamagedObject(t *testing.T) {
	srv := s3test.Start(t)
	srv.MakeBucket(t, "backups")
	s := newStore(t, srv, "backups", "muster", "")
	ctx := context.Background()
	file, data := writeFile(t, t.TempDir(), "muster-20260101T000000.000Z.snapshot", 4096)
	if _, err := s.Upload(ctx, file, filepath.Base(file)); err != nil {
		t.Fatal(err)
	}
	// versitygw's posix backend keeps each object as a file of the
	// bucket's directory, its checksum in an extended attribute.
	stored := filepath.Join(srv.Dir, "data", "backups", "muster", filepath.Base(file))
	data[100] ^= 0xff
	if err := os.WriteFile(stored, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err := s.Download(ctx, filepath.Base(file), dir)
	if err == nil || !strings.Contains(err.Error(), "does not match the SHA-256 the store keeps") {
		t.Errorf("download of a damaged object: %v, want it refused for its checksum", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the refused download left %v behind", left)
	}
}

// Over HTTPS, a store whose certificate a private CA signed is reached
// with that CA's file, and refused without it, saying which flag to give.
func TestPrivateCA(t *testing.T) {
	srv := s3test.StartTLS(t)
	srv.MakeBucket(t, "backups")
	file, _ := writeFile(t, t.TempDir(), "muster-20260101T000000.000Z.snapshot", 1000)
	ctx := context.Background()
	for _, tc := range []struct {
		name, ca, want string
	}{
		{"with the CA file", srv.CAFile, ""},
		{"without it", "", "a CA this machine does not trust: give that CA's PEM file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := s3store.New(s3store.Config{
				Endpoint: srv.Endpoint, Bucket: "backups", Region: srv.Region, CAFile: tc.ca,
				CredentialsFile: srv.CredentialsFile(t, ""),
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Upload(ctx, file, filepath.Base(file))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("upload over HTTPS: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("upload: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

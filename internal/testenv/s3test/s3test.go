// Package s3test gives tests a real S3-compatible server: versitygw over a
// temporary directory, in its own process on a free loopback port, with
// an access key and secret, checking the AWS signature of every request
// as an object store would. hack/s3.sh builds it (`make s3`) into
// ~/.cache/muster/s3; $MUSTER_TEST_VERSITYGW names another binary. Without
// one, tests fail under CI (an untested upload must never pass as tested)
// and skip elsewhere with the reason and the command that builds it.
package s3test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/testcert"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/muster-io/muster/internal/testenv/proc"
)

// Server is a running versitygw.
type Server struct {
	// Endpoint is http://127.0.0.1:PORT.
	Endpoint string
	// Host is 127.0.0.1:PORT.
	Host string
	// AccessKey and Secret are the one account the server accepts.
	AccessKey, Secret string
	// Region is the region the server signs for.
	Region string
	// Dir holds the buckets (one directory each) and the server's log.
	Dir string
	// CAFile, with StartTLS, signed the server's certificate (for
	// 127.0.0.1); empty for a plain-HTTP server.
	CAFile string

	proc *proc.Proc
}

// Binary is the versitygw to run: $MUSTER_TEST_VERSITYGW, else the one
// hack/s3.sh builds.
func Binary() (string, error) {
	if b := os.Getenv("MUSTER_TEST_VERSITYGW"); b != "" {
		return b, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	dir := os.Getenv("MUSTER_S3_DIR")
	if dir == "" {
		dir = filepath.Join(home, ".cache", "muster", "s3", "versitygw-v1.8.0")
	}
	b := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Errorf("no versitygw at %s: run make s3 (hack/s3.sh builds it), or set MUSTER_TEST_VERSITYGW", b)
	}
	return b, nil
}

// Start runs a fresh S3 server for this test, with an empty data dir,
// speaking plain HTTP.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartTLS is Start serving HTTPS with a certificate for 127.0.0.1 signed
// by a throwaway CA (CAFile), as an operator's store would.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, withTLS bool) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("an S3 server is required under CI: %v", err)
		}
		t.Skipf("no S3 server for this test: %v", err)
	}
	dir, err := os.MkdirTemp("", "muster-s3test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	s := &Server{
		Host:      fmt.Sprintf("127.0.0.1:%d", port),
		AccessKey: "muster" + random(4),
		Secret:    random(20),
		Region:    "us-east-1",
		Dir:       dir,
	}
	s.Endpoint = "http://" + s.Host
	args := []string{"--port", s.Host, "--region", s.Region}
	if withTLS {
		s.Endpoint = "https://" + s.Host
		s.CAFile = filepath.Join(dir, "ca.crt")
		cert, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
		if err := testcert.Write(s.CAFile, cert, key, "versitygw"); err != nil {
			t.Fatalf("writing the test TLS certificates: %v", err)
		}
		args = append(args, "--cert", cert, "--key", key)
	}
	cmd := exec.Command(bin, append(args, "posix", data)...)
	// The root account from the environment, not argv, as the server's
	// own flags allow: the secret stays out of ps.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.Secret)
	s.proc = proc.Start(t, cmd, filepath.Join(dir, "versitygw.log"))
	if err := s.waitReady(30 * time.Second); err != nil {
		t.Fatalf("versitygw at %s did not answer: %v\n%s", s.Endpoint, err, s.Log())
	}
	return s
}

// Stop ends the server and waits for it.
func (s *Server) Stop() { s.proc.Stop() }

// Log is what the server wrote so far, for failure messages.
func (s *Server) Log() string { return s.proc.Log() }

// Client is an S3 client with the server's account, for a test to look
// at the bucket with.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	opts := &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.Secret, ""), Region: s.Region, BucketLookup: minio.BucketLookupPath,
	}
	if s.CAFile != "" {
		pemBytes, err := os.ReadFile(s.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pemBytes)
		opts.Secure = true
		opts.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	c, err := minio.New(s.Host, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MakeBucket creates a bucket.
func (s *Server) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client(t).MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("creating bucket %s: %v\n%s", name, err, s.Log())
	}
}

// Keys lists the object names in bucket under prefix.
func (s *Server) Keys(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for o := range s.Client(t).ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("listing s3://%s/%s: %v", bucket, prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// CredentialsFile writes the server's account to a file of mode 0600 in
// the AWS shared credentials format and returns its path; secret replaces
// the right secret when not empty, for tests of a wrong one.
func (s *Server) CredentialsFile(t testing.TB, secret string) string {
	t.Helper()
	if secret == "" {
		secret = s.Secret
	}
	f, err := os.CreateTemp(s.Dir, "credentials-*")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", s.AccessKey, secret); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func (s *Server) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		// Any HTTP answer (an anonymous request is refused with 403)
		// says the server listens.
		// (Certificate unchecked: only whether it listens.)
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := hc.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-s.proc.Done():
			return errors.New("versitygw exited (its log says why)")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

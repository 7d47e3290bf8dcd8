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
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
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

	cmd  *exec.Cmd
	done chan struct{}
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

// Start runs a fresh S3 server for this test, with an empty data dir.
func Start(t testing.TB) *Server {
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
	logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "--port", s.Host, "--region", s.Region, "posix", data)
	// The root account from the environment, not argv, as the server's
	// own flags allow: the secret stays out of ps.
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.Secret)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", bin, err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); logf.Close(); close(s.done) }()
	t.Cleanup(s.Stop)
	if err := s.waitReady(30 * time.Second); err != nil {
		t.Fatalf("versitygw at %s did not answer: %v\n%s", s.Endpoint, err, s.Log())
	}
	return s
}

// Stop ends the server and waits for it.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

// Log is what the server wrote so far, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "versitygw.log"))
	return string(b)
}

// Client is an S3 client with the server's account, for a test to look
// at the bucket with.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Host, &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.Secret, ""), Region: s.Region, BucketLookup: minio.BucketLookupPath,
	})
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
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("versitygw exited: %v", s.cmd.ProcessState)
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

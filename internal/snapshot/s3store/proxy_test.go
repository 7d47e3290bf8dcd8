package s3store_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/snapshot/s3store"
)

// TestS3ThroughProxy: the server's S3 client (minio-go's transport) takes
// its proxy from HTTPS_PROXY/NO_PROXY, as Go does: a store's request goes to
// the proxy as a CONNECT to the store, unless NO_PROXY names the store.
// Go reads the proxy variables once per process, so each case runs the
// store in a child process of this test binary with its own environment.
func TestS3ThroughProxy(t *testing.T) {
	if os.Getenv("S3STORE_PROXY_CHILD") == "1" {
		s, err := s3store.New(s3store.Config{Endpoint: "https://s3.example.invalid:9000", Bucket: "snapshots", Region: "us-east-1"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		t.Logf("Check through the environment's proxy: %v", s.Check(ctx))
		return
	}
	for _, tc := range []struct {
		name, noProxy string
		proxied       bool
	}{
		{"HTTPS_PROXY", "", true},
		{"NO_PROXY names the store", "s3.example.invalid", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := make(chan string, 10)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
						got <- req.Method + " " + req.Host
						_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
					}
					c.Close()
				}
			}()
			cmd := exec.Command(os.Args[0], "-test.run=^TestS3ThroughProxy$", "-test.v")
			cmd.Env = append(os.Environ(), "S3STORE_PROXY_CHILD=1", "HTTPS_PROXY=http://"+l.Addr().String(), "https_proxy=",
				"NO_PROXY="+tc.noProxy, "no_proxy=", "AWS_ACCESS_KEY_ID=AKIATEST", "AWS_SECRET_ACCESS_KEY=secret")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the child: %v\n%s", err, out)
			}
			select {
			case r := <-got:
				if !tc.proxied {
					t.Errorf("NO_PROXY names the store, yet the proxy got %q", r)
				} else if r != "CONNECT s3.example.invalid:9000" {
					t.Errorf("the proxy got %q, want CONNECT s3.example.invalid:9000", r)
				}
			default:
				if tc.proxied {
					t.Errorf("the store's request did not reach the proxy:\n%s", out)
				}
			}
		})
	}
}

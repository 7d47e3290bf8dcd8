// Command muster-test-receiver is the HTTPS receiver tests send webhooks
// to (audit events, notifications): a real server in its own process that
// checks each request's HMAC-SHA256 signature when given a key, and appends
// what it accepted, one JSON line per request, to a file the test reads.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Record is one accepted request, as written to --out.
type Record struct {
	Time        time.Time       `json:"time"`
	Path        string          `json:"path"`
	ContentType string          `json:"contentType"`
	Signature   string          `json:"signature,omitempty"`
	Body        json.RawMessage `json:"body"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve HTTPS on")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "serving key (PEM)")
	out := flag.String("out", "", "file to append accepted requests to, one JSON line each")
	hmacKeyFile := flag.String("hmac-key-file", "", "file holding the HMAC-SHA256 key requests must be signed with (none: no check)")
	header := flag.String("signature-header", "X-Muster-Signature", "header carrying \"sha256=<hex of HMAC-SHA256 of the body>\"")
	flag.Parse()

	var hmacKey []byte
	if *hmacKeyFile != "" {
		b, err := os.ReadFile(*hmacKeyFile)
		if err != nil {
			log.Fatalf("reading --hmac-key-file: %v", err)
		}
		hmacKey = []byte(strings.TrimSpace(string(b)))
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		log.Fatalf("opening --out: %v", err)
	}
	var mu sync.Mutex
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return // the test's readiness probe
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sig := r.Header.Get(*header)
		if hmacKey != nil {
			m := hmac.New(sha256.New, hmacKey)
			m.Write(body)
			want := "sha256=" + hex.EncodeToString(m.Sum(nil))
			if !hmac.Equal([]byte(sig), []byte(want)) {
				log.Printf("refused %s: bad signature %q", r.URL.Path, sig)
				http.Error(w, "bad signature", http.StatusUnauthorized)
				return
			}
		}
		if !json.Valid(body) {
			log.Printf("refused %s: body is not JSON", r.URL.Path)
			http.Error(w, "body is not JSON", http.StatusBadRequest)
			return
		}
		line, _ := json.Marshal(Record{Time: time.Now(), Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"), Signature: sig, Body: body})
		mu.Lock()
		_, err = f.Write(append(line, '\n'))
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	fmt.Println("serving on", *listen)
	log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, nil))
}

package snapshot

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/history"
)

// sample is a small snapshot: a few keys and history rows, one key's
// value holding bytes that are not text.
func sample(t *testing.T) (Header, []entry, []history.Row, []byte) {
	t.Helper()
	at := time.Date(2026, 11, 17, 9, 0, 0, 0, time.UTC)
	h := Header{Format: Format, Revision: 42, Keys: 3, Taken: at, Backend: "sqlite", HistoryRows: 2, Deployment: &Deployment{CA: "ab12"}}
	entries := []entry{
		{Key: "/registry/muster.io/machines/node-1", Value: []byte(`{"kind":"Machine"}`)},
		{Key: "/registry/muster.io/clusters/c-1", Value: []byte{0, 1, 2, 0xff, '\n'}},
		{Key: "/muster/bootstrap/ca", Value: []byte(`{"version":1}`)},
	}
	rows := []history.Row{
		{ID: 7, Record: history.Record{Kind: "Machine", Name: "node-1", UID: "u1", Seq: 1, From: "", To: "Pending", Event: "register", By: "muster-server", At: at, Revision: 5}},
		{ID: 9, Record: history.Record{Kind: "Machine", Name: "node-1", UID: "u1", Seq: 2, From: "Pending", To: "Running", Event: "run", Reason: "agent \"up\"", At: at.Add(time.Second), Revision: 6}},
	}
	var b bytes.Buffer
	if err := encode(&b, h, entries, rows); err != nil {
		t.Fatal(err)
	}
	return h, entries, rows, b.Bytes()
}

// writeTemp writes b to the test's one snapshot file, over the last.
func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	f := filepath.Join(tempDir(t), "muster.snapshot")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

var tempDirs = map[string]string{}

func tempDir(t *testing.T) string {
	if d, ok := tempDirs[t.Name()]; ok {
		return d
	}
	tempDirs[t.Name()] = t.TempDir()
	return tempDirs[t.Name()]
}

// TestFormatRoundTrip: what is written is read back as it was, keys,
// history rows (ids included) and header, and the checksum matches.
func TestFormatRoundTrip(t *testing.T) {
	h, entries, rows, b := sample(t)
	c, err := Load(writeTemp(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Entries, entries) {
		t.Errorf("keys read back %+v, want %+v", c.Entries, entries)
	}
	if !reflect.DeepEqual(c.History, rows) {
		t.Errorf("history read back %+v, want %+v", c.History, rows)
	}
	if !reflect.DeepEqual(c.Header, h) {
		t.Errorf("header read back %+v, want %+v", c.Header, h)
	}
	if len(c.Checksum) != 64 || !strings.Contains(c.Describe(), "OK: 3 keys and 2 transition history rows") {
		t.Errorf("checksum %q, describe %q", c.Checksum, c.Describe())
	}
}

// TestFormatTruncated: a file cut at any byte is refused as cut short
// (or, cut inside the header, as not a snapshot), never read as a smaller
// snapshot.
func TestFormatTruncated(t *testing.T) {
	_, _, _, b := sample(t)
	for n := 0; n < len(b); n++ {
		_, err := Load(writeTemp(t, b[:n]))
		if err == nil {
			t.Fatalf("a snapshot cut to %d of %d bytes was accepted", n, len(b))
		}
		headerEnd := bytes.IndexByte(b, '\n')
		if n > headerEnd && !strings.Contains(err.Error(), "cut short") {
			t.Errorf("cut to %d bytes: %v, want it to say cut short", n, err)
		}
	}
}

// TestFormatBitFlip: one flipped bit anywhere before the end line is
// found, by the checksum or by the line no longer parsing.
func TestFormatBitFlip(t *testing.T) {
	_, _, _, b := sample(t)
	end := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1 // the trailer starts here
	for i := 0; i < end; i++ {
		for _, bit := range []byte{0x01, 0x20} {
			flipped := bytes.Clone(b)
			flipped[i] ^= bit
			if _, err := Load(writeTemp(t, flipped)); err == nil {
				t.Fatalf("a snapshot with byte %d (%q) flipped by %#x was accepted", i, b[i], bit)
			}
		}
	}
	// A flip in a key's value that keeps the JSON valid is the checksum's
	// to find, and it says so.
	i := bytes.Index(b, []byte("Machine"))
	flipped := bytes.Clone(b)
	flipped[i] ^= 0x20 // "machine"
	_, err := Load(writeTemp(t, flipped))
	if err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("a changed letter: %v, want damaged with the SHA-256", err)
	}
}

// TestFormatV1: a snapshot written before history and checksums (a header
// and the keys) still reads, and says it could check only the count.
func TestFormatV1(t *testing.T) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(enc.Encode(map[string]any{"format": FormatV1, "revision": 9, "keys": 2, "taken": time.Now().UTC(), "backend": "postgres"}))
	must(enc.Encode(map[string]any{"k": "/registry/muster.io/clusters/a", "v": []byte("a")}))
	must(enc.Encode(map[string]any{"k": "/muster/bootstrap/ca", "v": []byte("b")}))
	c, err := Load(writeTemp(t, b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Entries) != 2 || len(c.History) != 0 || c.Checksum != "" || !strings.Contains(c.Describe(), "format v1") {
		t.Errorf("v1 read as %+v: %s", c, c.Describe())
	}
	// A v1 file missing a key is still refused by its count.
	lines := bytes.SplitAfter(b.Bytes(), []byte("\n"))
	if _, err := Load(writeTemp(t, bytes.Join(lines[:2], nil))); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("a v1 file missing a key: %v", err)
	}
}

// TestFormatNotASnapshot: another file is refused as not a snapshot.
func TestFormatNotASnapshot(t *testing.T) {
	for _, b := range []string{"", "hello\n", `{"format":"muster.io/datastore-snapshot/v9"}` + "\n"} {
		if _, err := Load(writeTemp(t, []byte(b))); err == nil || !strings.Contains(err.Error(), "not a muster datastore snapshot") {
			t.Errorf("%q: %v", b, err)
		}
	}
}

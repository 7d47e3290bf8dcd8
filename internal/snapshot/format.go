package snapshot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/muster-io/muster/internal/history"
)

// The file is JSON lines:
//
//	{"format":"muster.io/datastore-snapshot/v2","revision":..,"keys":N,"history":M,...}   the header
//	{"k":"/registry/...","v":"<base64>"}                                                   N keys
//	{"t":{"id":..,"kind":"Machine",...}}                                                   M history rows
//	{"end":{"sha256":"<hex>","keys":N,"history":M}}                                        the trailer
//
// The trailer's sha256 is over every byte before it (the header and every
// record line), so `datastore verify` finds a flipped bit anywhere, and a
// file without its trailer was cut short. Version 1 files (a header and
// the keys, no history, no trailer) still restore.

// Format names the file format written now.
const Format = "muster.io/datastore-snapshot/v2"

// FormatV1 is the format written until 2026-11-27: no transition history
// and no checksum. Such files still restore.
const FormatV1 = "muster.io/datastore-snapshot/v1"

// Deployment identifies the deployment a snapshot was taken of, so that a
// restore into another deployment's data dir is refused.
type Deployment struct {
	// CA is the SHA-256 of the cluster CA certificate (tls/ca.crt), the
	// <hash> of the deployment's join tokens.
	CA string `json:"ca"`
}

// line is one line after the header: a key, a history row or the trailer.
type line struct {
	Key     string       `json:"k,omitempty"`
	Value   []byte       `json:"v,omitempty"`
	History *history.Row `json:"t,omitempty"`
	End     *trailer     `json:"end,omitempty"`
}

type trailer struct {
	SHA256  string `json:"sha256"`
	Keys    int    `json:"keys"`
	History int    `json:"history"`
}

// Contents is a snapshot file read and checked.
type Contents struct {
	Header
	Entries []entry
	History []history.Row
	// Checksum is the SHA-256 the trailer holds and the file matched; ""
	// for a version 1 file, which has none.
	Checksum string
}

// encoder writes the lines and sums them.
type encoder struct {
	w   *bufio.Writer
	sum hash.Hash
	enc *json.Encoder
}

func newEncoder(out io.Writer) *encoder {
	e := &encoder{w: bufio.NewWriterSize(out, 1<<20), sum: sha256.New()}
	e.enc = json.NewEncoder(io.MultiWriter(e.w, e.sum))
	return e
}

func (e *encoder) encode(v any) error { return e.enc.Encode(v) }

// finish writes the trailer, which the checksum does not cover.
func (e *encoder) finish(keys, hist int) error {
	t := line{End: &trailer{SHA256: hex.EncodeToString(e.sum.Sum(nil)), Keys: keys, History: hist}}
	if err := json.NewEncoder(e.w).Encode(t); err != nil {
		return err
	}
	return e.w.Flush()
}

// encode writes a whole snapshot: the header, the keys, the history
// rows and the trailer.
func encode(out io.Writer, h Header, entries []entry, rows []history.Row) error {
	enc := newEncoder(out)
	if err := enc.encode(h); err != nil {
		return err
	}
	for _, e := range entries {
		if err := enc.encode(line{Key: e.Key, Value: e.Value}); err != nil {
			return err
		}
	}
	for i := range rows {
		if err := enc.encode(line{History: &rows[i]}); err != nil {
			return err
		}
	}
	return enc.finish(len(entries), len(rows))
}

// Load reads a snapshot file and checks it whole: its format, every
// line, the counts its header and trailer give, and the checksum. Every
// error names the file, what is wrong, and what to do.
func Load(file string) (*Contents, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	defer f.Close()
	return decode(file, bufio.NewReaderSize(f, 1<<20))
}

func decode(file string, r *bufio.Reader) (*Contents, error) {
	sum := sha256.New()
	first, err := r.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	var c Contents
	if jerr := json.Unmarshal(first, &c.Header); jerr != nil || (c.Format != Format && c.Format != FormatV1) {
		what := fmt.Sprintf("format %q", c.Format)
		if jerr != nil {
			what = jerr.Error()
		}
		return nil, fmt.Errorf("%s is not a muster datastore snapshot (want format %s, first line: %s): give a file written by muster-server datastore snapshot", file, Format, what)
	}
	sum.Write(first)
	cut := func(what string) error {
		return fmt.Errorf("%s is cut short: %s, after %d of %d keys and %d of %d history rows; the file is incomplete (a copy or upload that stopped part way?): use a complete copy, or take the snapshot again",
			file, what, len(c.Entries), c.Keys, len(c.History), c.HistoryRows)
	}
	var end *trailer
	for n := 2; ; n++ {
		b, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(b) == 0 {
				break
			}
			// A last line without its newline: the file stops mid-line.
			return nil, cut(fmt.Sprintf("line %d stops mid-way", n))
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		if end != nil {
			return nil, fmt.Errorf("%s is damaged: line %d follows the end line; use a complete copy, or take the snapshot again", file, n)
		}
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("%s is damaged at line %d (%v): use an undamaged copy, or take the snapshot again", file, n, err)
		}
		switch {
		case l.End != nil:
			end = l.End
			continue
		case l.History != nil:
			if c.Format == FormatV1 {
				return nil, fmt.Errorf("%s is damaged at line %d: a history row in a version 1 snapshot; use an undamaged copy, or take the snapshot again", file, n)
			}
			c.History = append(c.History, *l.History)
		case l.Key != "":
			if len(c.History) > 0 {
				return nil, fmt.Errorf("%s is damaged at line %d: a key after the history rows; use an undamaged copy, or take the snapshot again", file, n)
			}
			c.Entries = append(c.Entries, entry{Key: l.Key, Value: l.Value})
		default:
			return nil, fmt.Errorf("%s is damaged at line %d: neither a key, a history row nor the end; use an undamaged copy, or take the snapshot again", file, n)
		}
		sum.Write(b)
	}
	if c.Format == FormatV1 {
		if len(c.Entries) != c.Keys {
			return nil, fmt.Errorf("%s holds %d keys, its header says %d: the file is incomplete; take the snapshot again", file, len(c.Entries), c.Keys)
		}
		return &c, nil
	}
	if end == nil {
		return nil, cut("the end line with its checksum is missing")
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if got != end.SHA256 {
		return nil, fmt.Errorf("%s is damaged: its records' SHA-256 is %s, the snapshot recorded %s (a byte changed since it was written): use an undamaged copy, or take the snapshot again", file, got, end.SHA256)
	}
	if len(c.Entries) != c.Keys || len(c.Entries) != end.Keys || len(c.History) != c.HistoryRows || len(c.History) != end.History {
		return nil, fmt.Errorf("%s holds %d keys and %d history rows, its header says %d and %d, its end line %d and %d: the file is inconsistent; take the snapshot again",
			file, len(c.Entries), len(c.History), c.Keys, c.HistoryRows, end.Keys, end.History)
	}
	c.Checksum = got
	return &c, nil
}

// Describe says what a checked snapshot holds, for `datastore verify`.
func (c *Contents) Describe() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "OK: %d keys", len(c.Entries))
	if c.Format == FormatV1 {
		fmt.Fprintf(&b, " at revision %d from %s, taken %s; format v1: no transition history and no checksum, so only the key count was checked",
			c.Revision, c.Backend, c.Taken.Format("2006-01-02T15:04:05Z"))
		return b.String()
	}
	fmt.Fprintf(&b, " and %d transition history rows at revision %d from %s, taken %s; sha256 %s matches", len(c.History), c.Revision, c.Backend,
		c.Taken.Format("2006-01-02T15:04:05Z"), c.Checksum)
	if c.Deployment != nil {
		fmt.Fprintf(&b, "; deployment CA sha256 %s", c.Deployment.CA)
	}
	return b.String()
}

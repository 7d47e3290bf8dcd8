// Package logformat chooses how a binary's lines look (--log-format):
// klog's text, or JSON lines with component-base's encoder, the one
// Kubernetes components write, so that log pipelines built for them parse
// muster's lines too.
package logformat

import (
	"fmt"
	"io"

	"github.com/go-logr/logr"
	logsjson "k8s.io/component-base/logs/json"
	"k8s.io/klog/v2"
)

// Usage is the flag's help text, the same for both binaries.
const Usage = "log line format: text or json (one JSON object per line, as Kubernetes components write with --logging-format=json)"

// Check refuses a format other than text or json, saying which exist.
func Check(format string) error {
	switch format {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("--log-format %q: give text or json", format)
}

// Apply routes klog, and so everything logged through it, into format's
// lines on w.
func Apply(format string, w io.Writer) error {
	if err := Check(format); err != nil {
		return err
	}
	if format == "json" {
		klog.SetLogger(JSON(w))
	}
	return nil
}

// JSON is a logger writing one JSON object per line to w.
func JSON(w io.Writer) logr.Logger {
	l, _ := logsjson.NewJSONLogger(0, logsjson.AddNopSync(w), nil, nil)
	return l
}

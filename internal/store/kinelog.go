package store

import (
	"io"
	"sync"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

var routeOnce sync.Once

// routeKineLogs sends kine's logrus lines through klog, so that the server
// writes one format (text or --log-format json) instead of two
// interleaved: logrus itself writes nothing. quiet drops kine's
// informational lines (Config.Quiet).
func routeKineLogs(quiet bool) {
	routeOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		logrus.AddHook(klogHook{})
	})
	if quiet {
		logrus.SetLevel(logrus.WarnLevel)
	}
}

// klogHook forwards each logrus entry to klog at its level, its fields as
// key/value pairs.
type klogHook struct{}

func (klogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (klogHook) Fire(e *logrus.Entry) error {
	kv := make([]interface{}, 0, 2+2*len(e.Data))
	kv = append(kv, "component", "kine")
	for k, v := range e.Data {
		kv = append(kv, k, v)
	}
	switch {
	case e.Level <= logrus.ErrorLevel:
		klog.ErrorSDepth(6, nil, e.Message, kv...)
	case e.Level == logrus.WarnLevel:
		klog.InfoSDepth(6, e.Message, append(kv, "severity", "warning")...)
	case e.Level == logrus.InfoLevel:
		klog.InfoSDepth(6, e.Message, kv...)
	default:
		klog.V(4).InfoSDepth(6, e.Message, kv...)
	}
	return nil
}

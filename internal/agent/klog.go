package agent

import (
	"fmt"
	"strings"

	"github.com/go-logr/logr"
)

// sayLogger carries klog's lines (client-go's, and the command's last
// error) into the agent's own format: one timestamp and prefix for every
// line the agent writes.
type sayLogger struct {
	say    func(format string, args ...interface{})
	values []interface{}
}

func (l *sayLogger) Init(logr.RuntimeInfo) {}

// Enabled keeps klog's -v levels above 0 quiet, as klog's default does.
func (l *sayLogger) Enabled(level int) bool { return level <= 0 }

func (l *sayLogger) Info(_ int, msg string, kv ...interface{}) {
	l.say("%s%s", msg, l.pairs(kv))
}

func (l *sayLogger) Error(err error, msg string, kv ...interface{}) {
	l.say("%s: %v%s", msg, err, l.pairs(kv))
}

func (l *sayLogger) WithValues(kv ...interface{}) logr.LogSink {
	return &sayLogger{say: l.say, values: append(append([]interface{}{}, l.values...), kv...)}
}

func (l *sayLogger) WithName(string) logr.LogSink { return l }

func (l *sayLogger) pairs(kv []interface{}) string {
	all := append(append([]interface{}{}, l.values...), kv...)
	var b strings.Builder
	for i := 0; i+1 < len(all); i += 2 {
		fmt.Fprintf(&b, " %v=%q", all[i], fmt.Sprint(all[i+1]))
	}
	return b.String()
}

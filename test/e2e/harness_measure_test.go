package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// cpuSeconds is the CPU time (user and system) a process has used so far,
// from /proc/PID/stat, in seconds; 0 if it is gone.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields from
	// its closing parenthesis. utime and stime are fields 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	// In clock ticks, USER_HZ, which is 100 on every Linux architecture
	// Go runs on (sysconf(_SC_CLK_TCK) without cgo).
	return (utime + stime) / 100
}

// metricSum adds up every series of the metric name in a text exposition.
func metricSum(exposition, name string) float64 {
	sum := 0.0
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

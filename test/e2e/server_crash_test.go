package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServerKilledDuringPlanUpdates: kill -9 the server while 20 machines'
// plans change at once. After a restart every machine ends Running with its
// last plan applied, and every machine's recorded history is a legal chain.
func TestServerKilledDuringPlanUpdates(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		a := startAgent(t, s, t.TempDir(), "--token", token, "--node-name", fmt.Sprintf("crash-%02d", i))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			a.waitOutput(fmt.Sprintf("running as machine crash-%02d", i), 90*time.Second)
		}(i)
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		waitPhase(t, s, fmt.Sprintf("crash-%02d", i), "Running", 60*time.Second)
	}

	for round := 1; round <= 2; round++ {
		var upd sync.WaitGroup
		for i := 0; i < n; i++ {
			upd.Add(1)
			go func(i int) {
				defer upd.Done()
				// Errors are expected once the server is killed mid-way.
				_, _ = s.kubectl("patch", "machineplan", fmt.Sprintf("crash-%02d", i), "--type=merge",
					"-p", fmt.Sprintf(`{"spec":{"instructions":[{"name":"round","command":"/bin/sh","args":["-c","sleep 0.2; echo %d"]}]}}`, round))
			}(i)
		}
		if round == 1 {
			time.Sleep(300 * time.Millisecond)
			s.kill9()
			upd.Wait()
			s.start()
			continue
		}
		upd.Wait()
	}

	for i := 0; i < n; i++ {
		name := fmt.Sprintf("crash-%02d", i)
		waitFor(t, 90*time.Second, name+" to apply its last plan", func() bool {
			out, _ := s.kubectl("get", "machineplan", name, "-o", "jsonpath={.status.state} {.status.checksum} {.status.appliedChecksum} {.spec.instructions[0].args[1]}")
			f := strings.Fields(out)
			return len(f) >= 4 && f[0] == "succeeded" && f[1] == f[2] && strings.Contains(out, "echo 2")
		})
		waitPhase(t, s, name, "Running", 60*time.Second)
		assertLegalHistory(t, s, name)
	}
}

package e2e

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// consoleUnderChanges: with the fleet page open in ctx, change the plans of
// perSecond machines a second for window (each change takes its machine
// Running → Updating → Running as its simulated agent applies it), and
// report, from inside the browser, how the page kept up: the gaps between
// animation frames (a frozen page shows as a long gap), the main thread's
// long tasks (over 50 ms), and how many of the phase changes the page
// showed.
func consoleUnderChanges(b *testing.B, ctx context.Context, c clientset.Interface, perSecond int, window time.Duration) {
	ms, err := c.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, m := range ms.Items {
		names = append(names, m.Name)
	}
	// The page's own counters: frame gaps, long tasks, and phase changes of
	// rows it drew (a MutationObserver on the rows' phase cells would count
	// only rows in view; the total's text changes with any count).
	const probe = `(() => {
		window.__gaps = []; window.__long = [];
		let last = performance.now();
		const tick = (t) => { window.__gaps.push(t - last); last = t; if (!window.__stop) requestAnimationFrame(tick); };
		requestAnimationFrame(tick);
		new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); }).observe({ type: 'longtask' });
		return true;
	})()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](probe)); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	var changed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		sem := make(chan struct{}, 64)
		for n := 0; ; n++ {
			select {
			case <-stop:
				for range cap(sem) {
					sem <- struct{}{}
				}
				return
			case <-tick.C:
			}
			name := names[n%len(names)]
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				// One merge patch, one round trip: the driver must not be
				// what bounds the rate.
				patch := fmt.Sprintf(`{"spec":{"files":[{"path":"/tmp/console-bench","content":"change %d\n","mode":420}]}}`, n)
				_, err := c.MusterV1alpha1().MachinePlans().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				if err == nil {
					changed.Add(1)
				}
			}()
		}
	}()
	time.Sleep(window)
	close(stop)
	<-done
	type result struct {
		Gaps []float64 `json:"gaps"`
		Long []float64 `json:"long"`
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[result](`(() => { window.__stop = true; return { gaps: window.__gaps, long: window.__long }; })()`))
	if err != nil {
		b.Fatal(err)
	}
	sort.Float64s(res.Gaps)
	pct := func(p int) float64 {
		if len(res.Gaps) == 0 {
			return 0
		}
		return res.Gaps[min(len(res.Gaps)-1, len(res.Gaps)*p/100)]
	}
	longTotal := 0.0
	for _, d := range res.Long {
		longTotal += d
	}
	b.ReportMetric(float64(changed.Load())/window.Seconds(), "plan-changes/s")
	b.ReportMetric(float64(len(res.Gaps))/window.Seconds(), "frames/s")
	b.ReportMetric(pct(50), "frame-gap-p50-ms")
	b.ReportMetric(pct(99), "frame-gap-p99-ms")
	b.ReportMetric(pct(100), "frame-gap-max-ms")
	b.ReportMetric(longTotal/window.Seconds()/10, "long-task-%")
	b.Logf("under %d plan changes/s for %s: %d frames, frame gap p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d long tasks, %.0f ms in all",
		perSecond, window, len(res.Gaps), pct(50), pct(99), pct(100), len(res.Long), longTotal)
}

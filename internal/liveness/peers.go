package liveness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/serverendpoint"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// PeerPollInterval is how often the leader fetches the other servers'
// liveness reports; it adds at most this much to silence detection for
// agents connected elsewhere.
const PeerPollInterval = 2 * time.Second

// maxReportBytes bounds a report: 10,000 machines take about 400 KB.
const maxReportBytes = 64 << 20

// PollPeers merges every other live server's report into the tracker until
// ctx ends. transport carries this server's peer client certificate and the
// CA its peers' serving certificates are issued by.
func PollPeers(ctx context.Context, t *Tracker, endpoints listers.ServerEndpointLister, self string, transport *http.Transport) {
	transport.MaxIdleConnsPerHost = 1
	client := &http.Client{Timeout: PeerPollInterval * 2, Transport: transport}
	defer client.CloseIdleConnections()
	failing := map[string]bool{}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		all, err := endpoints.List(labels.Everything())
		if err != nil {
			return
		}
		now := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, e := range all {
			if e.Name == self || !serverendpoint.Live(e, now) {
				continue
			}
			wg.Add(1)
			go func(name, address string) {
				defer wg.Done()
				r, err := fetchReport(ctx, client, address)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if !failing[name] && ctx.Err() == nil {
						klog.InfoS("Cannot fetch a server's liveness report; its agents count as silent unless another server hears them", "server", name, "err", err)
					}
					failing[name] = true
					return
				}
				delete(failing, name)
				t.Merge(r)
				t.mergeTunnels(address, r.TunnelAgesMillis)
			}(e.Name, e.Spec.Address)
		}
		wg.Wait()
	}, PeerPollInterval)
}

func fetchReport(ctx context.Context, client *http.Client, address string) (Report, error) {
	var r Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+ReportPath, nil)
	if err != nil {
		return r, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("%s%s answered %s", address, ReportPath, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, maxReportBytes)).Decode(&r)
	return r, err
}

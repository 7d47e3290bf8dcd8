package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// TestListPagingWithGeneratedClient: the typed clientset Go users get pages
// through a list with continue tokens, on each backend, and kubectl's
// chunked list shows every object. Every page shows the list as of the
// first one, however the machines change in between, and is read from the
// watch cache's snapshot of that revision, not from the datastore.
func TestListPagingWithGeneratedClient(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		machines := clientset.NewForConfigOrDie(cfg).MusterV1alpha1().Machines()
		ctx := context.Background()
		const total = 7
		for i := 0; i < total; i++ {
			m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("page-%d", i)}, Spec: v1alpha1.MachineSpec{Cluster: "c"}}
			if _, err := machines.Create(ctx, m, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		fromDatastore := func() float64 {
			return metricSum(s.mustKubectl("get", "--raw", "/metrics"), `apiserver_storage_list_total{group="muster.io",index="",resource="machines",storage="etcd"}`)
		}
		before := fromDatastore()
		seen, pages, cont := map[string]bool{}, 0, ""
		for {
			list, err := machines.List(ctx, metav1.ListOptions{Limit: 3, Continue: cont})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if pages == 1 {
				// Changes after the first page are not in the walk.
				if _, err := machines.Create(ctx, &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "page-late"}, Spec: v1alpha1.MachineSpec{Cluster: "c"}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := machines.Delete(ctx, fmt.Sprintf("page-%d", total-1), metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if len(list.Items) > 3 {
				t.Fatalf("page of %d items with limit 3", len(list.Items))
			}
			for _, m := range list.Items {
				seen[m.Name] = true
			}
			if cont = list.Continue; cont == "" {
				break
			}
		}
		if len(seen) != total || pages != 3 || seen["page-late"] {
			t.Errorf("paged list saw %d machines in %d pages (%v); want the %d there were at its first page, in 3", len(seen), pages, seen, total)
		}
		if after := fromDatastore(); after != before {
			t.Errorf("the paged walk read the datastore %v times; every page should come from the watch cache", after-before)
		}
		out := s.mustKubectl("get", "machines", "--chunk-size=2", "-o", "name")
		for i := 0; i < total-1; i++ {
			if want := fmt.Sprintf("machine.muster.io/page-%d", i); !strings.Contains(out, want) {
				t.Errorf("chunked kubectl get lacks %s:\n%s", want, out)
			}
		}
	})
}

package registry

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// clusterREST refuses to delete a Cluster that still has Machines. Deleting
// a Cluster does not delete its Machines (yet): allowed, it would leave
// Machines in a cluster that no longer exists, and a Cluster re-created
// under the same name would inherit them. The check reads the watch cache:
// a Machine created a moment before the delete may be missed, which is why
// grants also refuse a cluster that is gone.
type clusterREST struct {
	*REST
	machines *genericregistry.Store
}

// Delete implements rest.GracefulDeleter. A dry run is refused the same way,
// so that it tells what the real delete would do.
func (r *clusterREST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if err := r.refuseNonEmpty(ctx, []string{name}); err != nil {
		return nil, false, err
	}
	return r.REST.Delete(ctx, name, deleteValidation, options)
}

// DeleteCollection implements rest.CollectionDeleter: the whole collection
// is refused, before anything is deleted, if any of its Clusters has
// Machines.
func (r *clusterREST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	list, err := r.REST.List(ctx, listOptions)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range list.(*api.ClusterList).Items {
		names = append(names, c.Name)
	}
	if err := r.refuseNonEmpty(ctx, names); err != nil {
		return nil, err
	}
	return r.REST.DeleteCollection(ctx, deleteValidation, options, listOptions)
}

// refuseNonEmpty answers 409 Conflict naming the first of clusters that
// still has Machines, how many, and how to delete them.
func (r *clusterREST) refuseNonEmpty(ctx context.Context, clusters []string) error {
	if len(clusters) == 0 {
		return nil
	}
	list, err := r.machines.List(clusterScoped(ctx), &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, m := range list.(*api.MachineList).Items {
		count[m.Spec.Cluster]++
	}
	sort.Strings(clusters)
	for _, name := range clusters {
		if n := count[name]; n > 0 {
			return apierrors.NewConflict(api.Resource(Cluster.Resource), name, fmt.Errorf("%s", nonEmptyMessage(name, n)))
		}
	}
	return nil
}

func nonEmptyMessage(cluster string, machines int) string {
	noun := "machines"
	if machines == 1 {
		noun = "machine"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cluster %s still has %d %s, and deleting a cluster does not delete its machines: ", cluster, machines, noun)
	fmt.Fprintf(&b, "delete them first with 'kubectl delete machines --field-selector %s'", fields.OneTermEqualSelector("spec.cluster", cluster))
	b.WriteString(" (or by label: kubectl delete machines -l ...), then delete the cluster")
	return b.String()
}

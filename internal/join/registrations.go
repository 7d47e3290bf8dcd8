package join

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/muster-io/muster/internal/printer"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// Resolve finds the registration an operator means: its own (hashed) name,
// or a node name, which an operator knows and a hash they would have to
// look up. For a node with several pending requests (an agent restarted
// while it waited) it picks the newest, the one an agent still waits on,
// and note says so.
func Resolve(ctx context.Context, c versioned.Interface, nameOrNode string) (name, note string, err error) {
	regs := c.MusterV1alpha1().ClusterRegistrations()
	if _, err := regs.Get(ctx, nameOrNode, metav1.GetOptions{}); err == nil {
		return nameOrNode, "", nil
	} else if !apierrors.IsNotFound(err) {
		return "", "", fmt.Errorf("reading registration %q: %w", nameOrNode, err)
	}
	list, err := regs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", fmt.Errorf("listing registrations: %w", err)
	}
	var pending, other []*api.ClusterRegistration
	for i := range list.Items {
		r := &list.Items[i]
		if r.Spec.NodeName != nameOrNode {
			continue
		}
		if r.Status.Phase == api.RegistrationPhasePending || r.Status.Phase == "" {
			pending = append(pending, r)
		} else {
			other = append(other, r)
		}
	}
	switch {
	case len(pending) == 1:
		return pending[0].Name, "", nil
	case len(pending) > 1:
		sort.Slice(pending, func(i, j int) bool { return olderThan(pending[j], pending[i]) })
		return pending[0].Name, fmt.Sprintf("node %s has %d pending registrations; deciding the newest, %s (the others expire unanswered)",
			nameOrNode, len(pending), pending[0].Name), nil
	case len(other) > 0:
		var seen []string
		for _, r := range other {
			seen = append(seen, fmt.Sprintf("%s (%s)", r.Name, r.Status.Phase))
		}
		return "", "", fmt.Errorf("node %s has no pending registration, only %s: list them with 'muster-server registration list'",
			nameOrNode, strings.Join(seen, ", "))
	}
	return "", "", fmt.Errorf("no registration is named %q or is for node %q: list them with 'muster-server registration list'", nameOrNode, nameOrNode)
}

// ListRegistrations prints the registrations, pending first (what waits on
// an operator), then the rest, newest first within each; format is "" for
// a table, or json or yaml as kubectl get -o would print them.
func ListRegistrations(ctx context.Context, c versioned.Interface, w io.Writer, format string, now time.Time) error {
	list, err := c.MusterV1alpha1().ClusterRegistrations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing registrations: %w", err)
	}
	items := list.Items
	sort.SliceStable(items, func(i, j int) bool {
		pi, pj := isPending(&items[i]), isPending(&items[j])
		if pi != pj {
			return pi
		}
		return olderThan(&items[j], &items[i])
	})
	switch format {
	case "json", "yaml":
		list.Items = items
		return printer.List(w, list, "ClusterRegistration", format)
	case "":
	default:
		return fmt.Errorf("--output %q: give json or yaml, or leave it out for a table", format)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNODE\tPHASE\tTOKEN\tAGE")
	for i := range items {
		r := &items[i]
		phase, token := string(r.Status.Phase), r.Spec.TokenID
		if phase == "" {
			phase = string(api.RegistrationPhasePending)
		}
		if token == "" {
			token = "<renewal>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Spec.NodeName, phase, token, duration.HumanDuration(now.Sub(r.CreationTimestamp.Time)))
	}
	return tw.Flush()
}

func isPending(r *api.ClusterRegistration) bool {
	return r.Status.Phase == api.RegistrationPhasePending || r.Status.Phase == ""
}

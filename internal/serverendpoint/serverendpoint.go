// Package serverendpoint keeps the ServerEndpoint registry: each server
// publishes its advertised address and renews it while it lives, withdraws
// it on a clean shutdown, and the controller leader deletes the endpoints
// of servers that died without withdrawing. Agents' load balancers and the
// leader's liveness poll learn the servers from these objects.
package serverendpoint

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

const (
	// LeaseDuration is how long an endpoint counts as live after its last
	// renewal; a server renews every RenewInterval, so two renewals may
	// fail in a row before its endpoint lapses.
	LeaseDuration = 15 * time.Second
	RenewInterval = 5 * time.Second
	// sweepGrace is how long past its lease a lapsed endpoint is kept
	// before the leader deletes it, so a server that was only slow finds
	// its own object still there.
	sweepGrace = 45 * time.Second
)

// Live reports whether e was renewed within its lease, as of now.
func Live(e *api.ServerEndpoint, now time.Time) bool {
	if e.Status.RenewTime == nil {
		return false
	}
	lease := time.Duration(e.Status.LeaseDurationSeconds) * time.Second
	return now.Before(e.Status.RenewTime.Add(lease))
}

// Publish creates or renews this server's endpoint every RenewInterval
// until ctx ends. Withdraw it separately on a clean shutdown, while the API
// still serves.
func Publish(ctx context.Context, client musterclient.MusterV1alpha1Interface, name, address string) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := renew(ctx, client, name, address); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Renewing this server's ServerEndpoint failed; retrying", "endpoint", name)
		}
	}, RenewInterval)
}

func renew(ctx context.Context, client musterclient.MusterV1alpha1Interface, name, address string) error {
	endpoints := client.ServerEndpoints()
	now := metav1.Now()
	status := api.ServerEndpointStatus{RenewTime: &now, LeaseDurationSeconds: int32(LeaseDuration / time.Second)}
	e, err := endpoints.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		e, err = endpoints.Create(ctx, &api.ServerEndpoint{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       api.ServerEndpointSpec{Address: address},
		}, metav1.CreateOptions{})
		if err == nil {
			klog.InfoS("Published this server's ServerEndpoint", "endpoint", name, "address", address)
		}
	}
	if err != nil {
		return err
	}
	if e.Spec.Address != address {
		e.Spec.Address = address
		if e, err = endpoints.Update(ctx, e, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	e.Status = status
	_, err = endpoints.UpdateStatus(ctx, e, metav1.UpdateOptions{})
	return err
}

// Withdraw deletes this server's endpoint, so agents stop choosing it
// before it stops answering.
func Withdraw(ctx context.Context, client musterclient.MusterV1alpha1Interface, name string) {
	err := client.ServerEndpoints().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "Withdrawing this server's ServerEndpoint failed; it lapses on its own", "endpoint", name, "after", LeaseDuration)
		return
	}
	klog.InfoS("Withdrew this server's ServerEndpoint", "endpoint", name)
}

// Sweep deletes, every RenewInterval until ctx ends, the endpoints of
// servers that stopped renewing without withdrawing. Only the controller
// leader runs it. The delete is conditional on the resourceVersion seen,
// so a server that renews at the same moment keeps its endpoint.
func Sweep(ctx context.Context, client musterclient.MusterV1alpha1Interface, lister listers.ServerEndpointLister) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		all, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		now := time.Now()
		for _, e := range all {
			if Live(e, now.Add(-sweepGrace)) || e.Status.RenewTime == nil && now.Sub(e.CreationTimestamp.Time) < sweepGrace {
				continue
			}
			rv := e.ResourceVersion
			err := client.ServerEndpoints().Delete(ctx, e.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
			if err == nil {
				klog.InfoS("Deleted the endpoint of a server that stopped renewing it", "endpoint", e.Name, "address", e.Spec.Address)
			}
		}
	}, RenewInterval)
}

// Package v1alpha1 is the muster.io/v1alpha1 API: the objects Muster keeps for
// every registration and every machine's lifecycle.
//
// The types are the documentation: every field says what it means, who sets it
// (the operator, the agent, or the server) and how it is used. The same Go types
// are registered as the internal version too, so the server needs no conversion
// code while there is a single version.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=io.muster.v1alpha1
// +groupName=muster.io
package v1alpha1

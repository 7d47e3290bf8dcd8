package registry

import (
	"fmt"
	"net"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Checks shared by several kinds. Each error names the field and says what
// is allowed, so a 422 tells the operator how to fix the object.

func validateDNSSubdomain(value string, path *field.Path, required bool) field.ErrorList {
	if value == "" {
		if required {
			return field.ErrorList{field.Required(path, "must be the name of an object (a DNS-1123 subdomain)")}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(value) {
		errs = append(errs, field.Invalid(path, value, msg))
	}
	return errs
}

func validateRoles(roles []string, path *field.Path) field.ErrorList {
	const maxRoles = 16
	var errs field.ErrorList
	if len(roles) > maxRoles {
		errs = append(errs, field.TooMany(path, len(roles), maxRoles))
	}
	seen := map[string]bool{}
	for i, r := range roles {
		for _, msg := range validation.IsDNS1123Label(r) {
			errs = append(errs, field.Invalid(path.Index(i), r, msg))
		}
		if seen[r] {
			errs = append(errs, field.Duplicate(path.Index(i), r))
		}
		seen[r] = true
	}
	return errs
}

func validateLabels(labels map[string]string, path *field.Path) field.ErrorList {
	const maxLabels = 64
	errs := metav1validation.ValidateLabels(labels, path)
	if len(labels) > maxLabels {
		errs = append(errs, field.TooMany(path, len(labels), maxLabels))
	}
	return errs
}

func validateMaxLen(value string, max int, path *field.Path) field.ErrorList {
	if len(value) > max {
		return field.ErrorList{field.TooLong(path, "", max)}
	}
	return nil
}

// validateToken checks an opaque identifier such as a clientID: printable,
// no whitespace, bounded.
func validateIdentifier(value string, path *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	if errs := validateMaxLen(value, 128, path); errs != nil {
		return errs
	}
	for _, r := range value {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			return field.ErrorList{field.Invalid(path, value, "may contain only letters, digits, '-', '_' and '.'")}
		}
	}
	return nil
}

func validateImmutable(newVal, oldVal interface{}, path *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateImmutableField(newVal, oldVal, path)
}

func validateHostPort(value string, path *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(path, "must be host:port")}
	}
	if _, port, err := net.SplitHostPort(value); err != nil || port == "" {
		return field.ErrorList{field.Invalid(path, value, fmt.Sprintf("must be host:port, e.g. 10.0.0.1:9443 (%v)", err))}
	}
	return nil
}

func validateNonNegative(value int32, path *field.Path) field.ErrorList {
	if value < 0 {
		return field.ErrorList{field.Invalid(path, value, "must be zero or greater")}
	}
	return nil
}

// maxAddresses bounds a machine's address list: a host has a handful.
const maxAddresses = 32

var addressTypes = map[api.MachineAddressType]bool{
	api.MachineHostName: true, api.MachineInternalIP: true, api.MachineExternalIP: true,
}

func validateAddresses(addrs []api.MachineAddress, path *field.Path) field.ErrorList {
	if len(addrs) > maxAddresses {
		return field.ErrorList{field.TooMany(path, len(addrs), maxAddresses)}
	}
	var errs field.ErrorList
	for i, a := range addrs {
		if !addressTypes[a.Type] {
			errs = append(errs, field.NotSupported(path.Index(i).Child("type"), a.Type,
				[]string{"Hostname", "InternalIP", "ExternalIP"}))
		}
		errs = append(errs, validateMaxLen(a.Address, 253, path.Index(i).Child("address"))...)
	}
	return errs
}
